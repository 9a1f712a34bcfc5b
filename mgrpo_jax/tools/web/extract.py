"""The main text of a fetched page: trafilatura for HTML, plain text as it is.

trafilatura (a maintained extraction library) keeps the article and drops the page's
navigation, headers, footers and comments; it is imported on the first page, so runs
without web tools never load it. The body is decoded with the charset the server named,
else trafilatura detects it. Extraction is deterministic: the same body gives the same
text, which is what lets a cached run replay exactly.
"""

from __future__ import annotations

from mgrpo_jax.tools.web.failures import WebError
from mgrpo_jax.tools.web.http_client import Response

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain",)
PAGE_TYPES = HTML_TYPES + TEXT_TYPES


def _decoded(response: Response) -> str | bytes:
  """The body as text when the server named a charset Python knows, else the bytes."""
  if not response.charset:
    return response.body
  try:
    return response.body.decode(response.charset, errors="replace")
  except LookupError:
    return response.body


def page_text(response: Response) -> tuple[str, str]:
  """(title, main text) of `response` ("" title when it has none); `WebError
  ("extraction_empty")` when no text is left."""
  if response.content_type in TEXT_TYPES:
    body = _decoded(response)
    title = ""
    text = body if isinstance(body, str) else body.decode("utf-8", errors="replace")
  else:
    import trafilatura  # 0.5 s of imports: paid by runs that visit pages only

    document = trafilatura.bare_extraction(_decoded(response), url=response.url,
                                           include_comments=False, with_metadata=True)
    title = (document.title or "") if document is not None else ""
    text = (document.text or "") if document is not None else ""
  text = text.strip()
  if not text:
    raise WebError("extraction_empty", f"{response.url}: no main text in its "
                   f"{len(response.body)} bytes of {response.content_type or 'unlabelled'} "
                   "content")
  return " ".join(title.split()), text
