"""Tokenizers (SentencePiece, GGUF byte-level BPE) and chat rendering with token masks."""

from mgrpo_jax.text.chat import (
    GENERATION_PROMPT_TEXT,
    IM_END,
    IM_START,
    SMOLLM2_DEFAULT_SYSTEM_PROMPT,
    Conversation,
    Role,
    message_text,
    render_chat,
    render_text,
)
from mgrpo_jax.text.chat_template import (
    CHATML_TEMPLATE,
    ChatTemplateError,
    TemplateFormat,
    chat_format,
)
from mgrpo_jax.text.gguf_bpe import GGUFTokenizer
from mgrpo_jax.text.sentencepiece_tokenizer import (
    DEFAULT_USER_DEFINED_SYMBOLS,
    SentencePieceTokenizer,
)
from mgrpo_jax.text.tokenizer import Tokenizer, TokenizerFileError, UnknownTokenError

__all__ = [
    "CHATML_TEMPLATE",
    "ChatTemplateError",
    "TemplateFormat",
    "chat_format",
    "DEFAULT_USER_DEFINED_SYMBOLS",
    "GENERATION_PROMPT_TEXT",
    "IM_END",
    "IM_START",
    "SMOLLM2_DEFAULT_SYSTEM_PROMPT",
    "Conversation",
    "GGUFTokenizer",
    "Role",
    "SentencePieceTokenizer",
    "Tokenizer",
    "TokenizerFileError",
    "UnknownTokenError",
    "message_text",
    "render_chat",
    "render_text",
]
