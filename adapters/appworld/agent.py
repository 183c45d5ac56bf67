"""The AppWorld agent scaffold: the ReAct-style code loop of the official baseline, 50 steps at most.

Each step the model writes one Python code block; the environment runs it and the printed output
is the next observation, until the supervisor's task is marked complete or the step limit is
reached; then AppWorld's own evaluation decides. A block made only of documentation calls
(``apis.api_docs.show_api_descriptions / show_api_doc / search_api_docs``) is not run: the
documentation channel answers it with the method's source context, and it counts as a step like any
other. When the conversation outgrows the context window, the oldest exchanges are dropped (as the
official scaffold trims its history); a first prompt that does not fit is a scored failure.

Departures from the official prompt: its rules are restated in our own words, its worked
demonstration task is left out (it would show documentation the method did not provide), and the
method's context for the instruction itself opens the conversation (``--opt initial_docs=no`` to
start from the instruction alone).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.data import estimate_tokens

from .channel import DocumentationChannel
from .environment import Environment, Evaluation

if TYPE_CHECKING:
    from harness.llm import BoundLLM

MAX_STEPS = 50
MAX_OBSERVATION_CHARS = 20_000
STAGE = "appworld_step"
DOC_FUNCTIONS = ("show_app_descriptions", "show_api_descriptions", "show_api_doc", "search_api_docs")
_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_OPEN_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*)$", re.DOTALL)

SYSTEM = (
    "You carry out everyday tasks for your supervisor by writing Python code that operates their apps. "
    "Every reply of yours holds exactly one ```python code block. An environment runs it and shows you what "
    "it printed; you go on from there, step by step, until the task is done. Variables stay defined from one "
    "block to the next. Put your reasoning in code comments."
)

RULES = """How to work:
1. Call an app's API as apis.<app>.<api_name>(argument=value, ...); results come back as Python dicts and lists. Print what you need to see.
2. Look APIs up before you use them. A code block that holds nothing but documentation calls is answered from the API documentation instead of being run:
   print(apis.api_docs.show_api_descriptions(app_name='spotify'))   # what APIs an app has
   print(apis.api_docs.show_api_doc(app_name='spotify', api_name='login'))   # one API's parameters and responses
   print(apis.api_docs.search_api_docs(query='add a song to a playlist'))   # find APIs for what you need
   print(apis.api_docs.show_app_descriptions())   # the apps
   Give literal arguments and keep documentation calls apart from other code.
3. Your supervisor's personal details, account passwords, addresses and payment cards are in the supervisor app.
4. Most apps need a login: get an access token from the app's login API and pass access_token to the APIs that ask for it.
5. APIs that return results in pages (page_index, page_limit) must be read page after page until nothing is left.
6. Friends, family, colleagues and other people mean entries in the phone app's contacts.
7. Take dates and times from the task's world (the phone app, or datetime.now() inside the environment), not from what you believe today's date is; for "yesterday" and the like use the whole day, 00:00:00 to 23:59:59.
8. Work in small steps and check each result before anything that cannot be undone. Only the apps' APIs are available: no internet, and "files" means the file_system app.
9. When the task is done, call apis.supervisor.complete_task(answer=<answer>) if it asks for information (just the value: a number as digits, or a name), or apis.supervisor.complete_task() otherwise. If it truly cannot be done, call apis.supervisor.complete_task(status="fail").
10. Nobody will answer questions: decide everything yourself."""


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
    trimmed_exchanges: int = 0

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


def first_message(info: Any, instruction: str, context: str) -> list[dict[str, str]]:
    sup = info.supervisor or {}
    name = " ".join(str(sup.get(k, "")).strip() for k in ("first_name", "last_name")).strip() or "your supervisor"
    contact = ", ".join(f"{k.replace('_', ' ')} {sup[k]}" for k in ("email", "phone_number") if sup.get(k))
    apps = "\n".join(f"- {a}: {d}" for a, d in (info.app_descriptions or {}).items())
    parts = [f"Supervisor: {name}" + (f" ({contact})" if contact else "") + "."]
    if info.datetime:
        parts.append(f"The task's world is at {info.datetime}.")
    if apps:
        parts.append("Apps:\n" + apps)
    parts.append(RULES)
    if context.strip():
        parts.append("Documentation the channel gives for this task:\n" + context.strip())
    parts.append(f"Task: {instruction.strip()}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


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

    async def _generate(self, messages: list[dict[str, str]], n_fixed: int, result: AgentResult):
        """One model call; on a context overflow, drop the oldest exchange and try again."""
        while True:
            res = await self.llm.generate(messages, stage=STAGE, max_tokens=self.max_tokens)
            if not (res.failed and res.error.startswith("context_overflow") and len(messages) >= n_fixed + 4):
                return res
            del messages[n_fixed:n_fixed + 2]  # the oldest (reply, observation) pair; the latest stays
            result.trimmed_exchanges += 1

    async def _docs(self, calls: list[DocCall], info: Any) -> str:
        out = []
        for call in calls:
            if call.function == "show_app_descriptions":
                out.append("\n".join(f"{a}: {d}" for a, d in (info.app_descriptions or {}).items()))
                continue
            reply = await self.channel.lookup(lookup_query(call))
            out.append(reply.render())
        return "\n\n".join(out)

    async def run(self, env: Environment, context: str = "") -> AgentResult:
        result = AgentResult()
        messages = first_message(env.info, env.info.instruction, context)
        n_fixed = len(messages)
        result.prompt_tokens = estimate_tokens("".join(m["content"] for m in messages))
        for _ in range(self.max_steps):
            res = await self._generate(messages, n_fixed, result)
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
