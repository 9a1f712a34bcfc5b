"""A recorded web on a loopback port: search APIs, pages and routes that fail.

`WebSite` serves, from a `ThreadingHTTPServer` in a thread on 127.0.0.1:

- `/searxng/search?q=...&format=json`: SearXNG-style JSON (`results[]` of `title`, `url`,
  `content`), one hit without a URL and one with a long snippet;
- `/api/find?query=...`: a generic API's JSON (`data.items[]` of `meta.name`, `link`,
  `summary`), 401 without the header `X-Api-Key: secret`; `/api/flat` a JSON object with
  no hits list; `/api/html` an HTML answer;
- `/page/lighthouse`: an article between a navigation bar, a header and a footer
  (`ARTICLE` is its text, `BOILERPLATE` phrases of the rest); `/page/plain` plain text;
  `/page/empty` HTML without text;
- failing routes: `/slow` (answers after 2 s), `/missing` (404), `/flaky/<name>` (500
  the first time each name is asked, then the article), `/broken` (always 500),
  `/busy` (always 429), `/pdf` (application/pdf), `/binary` (application/octet-stream),
  `/big` (announces `BIG_BYTES`), `/big-stream` (sends `BIG_BYTES` without announcing
  them), `/redirect` (302 to the article), `/redirect-loop` (302 to itself),
  `/redirect-ftp` (302 to an ftp:// URL).

`hits` counts the requests per path (query string excluded); `headers` keeps the
headers of the last request to each path.
"""

from __future__ import annotations

import collections
import http.server
import json
import threading
import urllib.parse

ARTICLE = (
  "The lighthouse of Varn was built in 1854 on the northern cliffs by the engineer Ada "
  "Morrow. Its lamp burned whale oil until 1901, when it was converted to kerosene.",
  "Keepers lived in the lighthouse with their families for nearly a century; the last "
  "keeper, Tomas Brenn, left in 1952 when the light was automated.",
  "Today the tower is a museum, open from April to October, and its original Fresnel "
  "lens is displayed in the lantern room.",
)
BOILERPLATE = ("About us", "Subscribe to our newsletter", "All rights reserved",
               "Privacy policy", "Terms of use")
BIG_BYTES = 50_000
API_KEY = "secret"
LONG_SNIPPET = "word " * 100

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>The Lighthouse of Varn
</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li>
<li><a href="/contact">Contact</a></li></ul></nav>
<header><div class="banner">Subscribe to our newsletter for weekly updates</div></header>
<main><article><h1>The Lighthouse of Varn</h1>{paragraphs}</article></main>
<footer><p>Copyright 2024 Example Media Group. All rights reserved.</p>
<a href="/privacy">Privacy policy</a> <a href="/terms">Terms of use</a></footer>
</body></html>"""
PAGE_HTML = _PAGE.format(paragraphs="".join(f"<p>{p}</p>" for p in ARTICLE)).encode()
_EMPTY_HTML = b"<html><head><title></title></head><body><script>var a = 1;</script></body></html>"


class WebSite:
  """The module docstring's server; `url(path)` is a route's URL. Stop it with `close`."""

  def __init__(self):
    self.hits: collections.Counter[str] = collections.Counter()
    self.headers: dict[str, dict[str, str]] = {}
    self._lock = threading.Lock()
    self._closing = threading.Event()
    site = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self):
        try:
          site._serve(self)
        except (BrokenPipeError, ConnectionResetError):
          pass  # the client gave up (a timeout test): nobody reads the answer

      def log_message(self, *args):
        pass

    self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
    self._thread = threading.Thread(target=self._server.serve_forever,
                                    kwargs={"poll_interval": 0.05}, daemon=True)
    self._thread.start()

  def url(self, path: str) -> str:
    return self.base + path

  def close(self) -> None:
    self._closing.set()
    self._server.shutdown()
    self._server.server_close()
    self._thread.join()

  def _serve(self, handler: http.server.BaseHTTPRequestHandler) -> None:
    parts = urllib.parse.urlsplit(handler.path)
    query = dict(urllib.parse.parse_qsl(parts.query))
    with self._lock:
      self.hits[parts.path] += 1
      count = self.hits[parts.path]
      self.headers[parts.path] = dict(handler.headers)
    route = parts.path
    if route == "/searxng/search" and query.get("format") == "json":
      self._json(handler, {"query": query.get("q", ""), "results": [
          {"title": "The Lighthouse of Varn", "url": self.url("/page/lighthouse"),
           "content": f"Built in 1854 ({query.get('q', '')})."},
          {"title": "No link here", "content": "a hit without a URL"},
          {"title": "Long", "url": self.url("/page/plain"), "content": LONG_SNIPPET}]})
    elif route == "/api/find":
      if handler.headers.get("X-Api-Key") != API_KEY:
        self._send(handler, 401, "application/json", b'{"error": "no key"}')
      else:
        self._json(handler, {"data": {"items": [
            {"meta": {"name": "Varn lighthouse"}, "link": self.url("/page/lighthouse"),
             "summary": f"About {query.get('query', '')}"},
            {"meta": {"name": 1854}, "link": self.url("/page/plain"), "summary": None}]}})
    elif route == "/api/flat":
      self._json(handler, {"data": {"items": "none"}})
    elif route == "/api/html":
      self._send(handler, 200, "text/html", b"<html><body>oops</body></html>")
    elif route == "/page/lighthouse" or (route.startswith("/flaky/") and count > 1):
      self._send(handler, 200, "text/html; charset=utf-8", PAGE_HTML)
    elif route == "/page/plain":
      self._send(handler, 200, "text/plain; charset=utf-8", "\n".join(ARTICLE).encode())
    elif route == "/page/empty":
      self._send(handler, 200, "text/html", _EMPTY_HTML)
    elif route == "/slow":
      self._closing.wait(2.0)
      self._send(handler, 200, "text/html", PAGE_HTML)
    elif route in ("/broken", "/busy") or route.startswith("/flaky/"):
      self._send(handler, 429 if route == "/busy" else 500, "text/plain", b"try later")
    elif route == "/pdf":
      self._send(handler, 200, "application/pdf", b"%PDF-1.4 not a page")
    elif route == "/binary":
      self._send(handler, 200, "application/octet-stream", bytes(range(256)))
    elif route == "/big":
      self._send(handler, 200, "text/html", b"x" * BIG_BYTES)
    elif route == "/big-stream":
      handler.send_response(200)
      handler.send_header("Content-Type", "text/html")
      handler.end_headers()  # no Content-Length: the body ends when the connection does
      handler.wfile.write(b"<p>" + b"x" * BIG_BYTES + b"</p>")
    elif route in ("/redirect", "/redirect-loop", "/redirect-ftp"):
      target = {"/redirect": "/page/lighthouse", "/redirect-loop": "/redirect-loop",
                "/redirect-ftp": "ftp://127.0.0.1/file"}[route]
      handler.send_response(302)
      handler.send_header("Location", target)
      handler.send_header("Content-Length", "0")
      handler.end_headers()
    else:
      self._send(handler, 404, "text/plain", b"not found")

  @staticmethod
  def _send(handler, status: int, content_type: str, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)

  def _json(self, handler, payload) -> None:
    self._send(handler, 200, "application/json", json.dumps(payload).encode())
