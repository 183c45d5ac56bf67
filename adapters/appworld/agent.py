"""The AppWorld agent scaffold: the official ReAct baseline's code loop, 50 steps at most.

The conversation opens with the baseline's own prompt (``prompt.py``: its worked demonstration, its
key instructions, then the task). Each step the model writes one Python code block; the environment
runs it and the printed output is the next observation, until the supervisor's task is marked
complete or the step limit is reached; then AppWorld's own evaluation decides. What the model sees of
a long conversation follows the official history rule (``history.py``: old observations blanked,
the last ones kept, then the oldest messages dropped).

A block made only of documentation calls (``apis.api_docs.show_app_descriptions / show_api_descriptions
/ show_api_doc / search_api_docs``) is not run: the documentation channel answers it with the
method's source context, and it counts as a step like any other. The departures from the official
agent are listed, with their reasons, in ``AppWorld.deviations``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sourcebench.harness.data import estimate_tokens

from .channel import DocumentationChannel
from .environment import Environment, Evaluation
from .history import trim
from .prompt import app_descriptions_json, instruction_messages

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

MAX_STEPS = 50
MAX_OBSERVATION_CHARS = 20_000
STAGE = "appworld_step"
DOC_FUNCTIONS = ("show_app_descriptions", "show_api_descriptions", "show_api_doc", "search_api_docs")
_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_OPEN_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*)$", re.DOTALL)


@dataclass
class DocCall:
    function: str
    kwargs: dict[str, Any]


@dataclass
class Step:
    kind: str  # code | docs | no_code | invalid_docs
    code: str
    observation: str

    def summary(self) -> dict[str, str]:
        """A compact record for the result row (the full exchange is in the model-call cache)."""
        return {"kind": self.kind, "code": self.code[:1000], "observation": self.observation[:300]}


@dataclass
class AgentResult:
    steps: list[Step] = field(default_factory=list)
    completed: bool = False
    failed: bool = False
    failure_reason: str = ""
    evaluation: Evaluation | None = None
    prompt_tokens: int = 0
    trimmed_exchanges: int = 0  # exchanges dropped because the trimmed view still overflowed the window
    blanked_observations: int = 0  # the most observations the history rule blanked in one step's view
    dropped_messages: int = 0  # the most messages it left out in one step's view

    @property
    def final_code(self) -> str:
        return next((s.code for s in reversed(self.steps) if s.kind == "code"), "")


def extract_code(text: str) -> tuple[str, str]:
    """(code of the first block, the reply cut after that block); an unterminated block runs to the end."""
    m = _CODE.search(text)
    if m:
        return m.group(1).strip(), text[: m.end()]
    m = _OPEN_CODE.search(text)
    if m:
        return m.group(1).strip(), text.rstrip() + "\n```"
    return "", text


def _doc_call(node: ast.AST) -> DocCall | None:
    """``apis.api_docs.f(...)`` or ``print(apis.api_docs.f(...))`` with literal arguments."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and len(node.args) == 1:
        node = node.args[0]
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    owner = node.func.value
    if not (isinstance(owner, ast.Attribute) and owner.attr == "api_docs" and isinstance(owner.value, ast.Name)
            and owner.value.id == "apis"):
        return None
    if node.func.attr not in DOC_FUNCTIONS or node.args:
        return None
    try:
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except ValueError:
        return None
    return DocCall(node.func.attr, kwargs)


def documentation_calls(code: str) -> list[DocCall] | str | None:
    """None: ordinary code, run it. A list: a documentation-only block. A string: why the block is refused."""
    if "api_docs" not in code:
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None  # the environment reports the syntax error itself
    calls = []
    for stmt in tree.body:
        call = _doc_call(stmt.value) if isinstance(stmt, ast.Expr) else None
        if call is None:
            return ("Not run: a block that uses apis.api_docs may contain only documentation calls such as "
                    "print(apis.api_docs.show_api_doc(app_name='...', api_name='...')), each with literal "
                    f"arguments (functions: {', '.join(DOC_FUNCTIONS)}).")
        calls.append(call)
    return calls


def lookup_query(call: DocCall) -> str:
    """The query a documentation call becomes for the channel."""
    kw = call.kwargs
    app = str(kw.get("app_name", "")).strip()
    if call.function == "show_api_doc":
        api = str(kw.get("api_name", "")).strip()
        return f"{app} app, {api.replace('_', ' ')} API ({app}.{api})".strip()
    if call.function == "show_api_descriptions":
        return f"the APIs of the {app} app"
    q = str(kw.get("query", "")).strip()
    return f"{q} ({app} app)" if app and q else q or f"the APIs of the {app} app"


def _observation(text: str) -> str:
    if len(text) > MAX_OBSERVATION_CHARS:
        text = text[:MAX_OBSERVATION_CHARS] + "\n[REST NOT SHOWN FOR BREVITY]"
    return f"Output:\n```\n{text}\n```"


class ReActAgent:
    """One task: prompt, loop, evaluate. The environment is opened and closed by the caller."""

    def __init__(self, llm: BoundLLM, channel: DocumentationChannel, max_steps: int = MAX_STEPS,
                 max_tokens: int | None = None):
        self.llm = llm
        self.channel = channel
        self.max_steps = max_steps
        self.max_tokens = max_tokens

    async def _generate(self, messages: list[dict[str, str]], n_instruction: int, result: AgentResult):
        """One model call on the official history view; if even that overflows the context window, drop the
        oldest exchange for good and try again (the latest exchange always stays)."""
        while True:
            view = trim(messages, n_instruction)
            result.blanked_observations = max(result.blanked_observations, view.blanked)
            result.dropped_messages = max(result.dropped_messages, view.dropped)
            res = await self.llm.generate(view.messages, stage=STAGE, max_tokens=self.max_tokens)
            if not (res.failed and res.error.startswith("context_overflow") and len(messages) >= n_instruction + 4):
                return res
            del messages[n_instruction:n_instruction + 2]  # the oldest (reply, observation) pair
            result.trimmed_exchanges += 1

    async def _docs(self, calls: list[DocCall], info: Any) -> str:
        out = []
        for call in calls:
            if call.function == "show_app_descriptions":  # the task's apps, listed as the docs app lists them
                out.append(app_descriptions_json(info.app_descriptions))
                continue
            reply = await self.channel.lookup(lookup_query(call))
            out.append(reply.render())
        return "\n\n".join(out)

    async def run(self, env: Environment, context: str = "") -> AgentResult:
        result = AgentResult()
        messages = instruction_messages(env.info, env.info.instruction, context)
        n_instruction = len(messages)
        result.prompt_tokens = estimate_tokens("".join(m["content"] for m in messages))
        for _ in range(self.max_steps):
            res = await self._generate(messages, n_instruction, result)
            if res.failed:
                result.failed, result.failure_reason = True, res.error
                break
            code, reply = extract_code(res.text)
            messages.append({"role": "assistant", "content": reply})
            if not code:
                step = Step("no_code", "", "No code block found: reply with one ```python block.")
            else:
                calls = documentation_calls(code)
                if calls is None:
                    step = Step("code", code, await env.execute(code))
                elif isinstance(calls, str):
                    step = Step("invalid_docs", code, calls)
                else:
                    step = Step("docs", code, await self._docs(calls, env.info))
            result.steps.append(step)
            if step.kind == "code" and await env.task_completed():
                result.completed = True
                break
            messages.append({"role": "user", "content": _observation(step.observation)})
        result.evaluation = await env.evaluate()
        return result
