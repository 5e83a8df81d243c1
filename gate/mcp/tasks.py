"""MCP tasks for `gate mcp prompt` and `gate mcp proxy`: a call held for a person answered as a
task that completes when the person decides.

A client that supports tasks (MCP 2025-11-25, experimental there) sends `tools/call` with a
`task` field; it then gets a `CreateTaskResult` at once, polls `tasks/get`, and reads the
tool's result with `tasks/result`, which waits until the task is done. Its own request timeout
then never meets a person's pace. The servers declare `tasks.requests.tools.call` and
`tasks.cancel`, and mark each tool `execution.taskSupport: "optional"`; a call without `task`
is answered as before (held, with progress notifications).

The installed SDK has the task types but does not dispatch them, so this module does: a
server middleware answers a task-augmented `tools/call` with its own result, and
`tasks/get`, `tasks/result` and `tasks/cancel` are plain request handlers. The work of a task
(ask gate, then forward or refuse) runs in the server's task group, so a client that
disconnects, or a stopped server, cancels it, and a cancelled wait withdraws its gate request
(see `gate.mcp.asking.Asker.ask`). `tasks/cancel` does the same and answers once the
withdrawal is done: a call whose task was cancelled is never run, even if approved later.
Tasks live in this process's memory: a restarted server knows none (`tasks/get` answers
-32602), and their gate requests were withdrawn when it stopped.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from gate.asking.askflow import CANCEL_TIMEOUT
from gate.asking.wording import clip

RELATED = "io.modelcontextprotocol/related-task"
IMMEDIATE = "io.modelcontextprotocol/model-immediate-response"
#: how often clients are told to poll tasks/get: a person's decision needs no finer grain
POLL_MS = 2000
#: how long a finished task is kept for tasks/get and tasks/result when the client asked for
#: no ttl (an hour), and the most it may ask for (a day); a task still waiting is always kept
DEFAULT_TTL_MS = 3_600_000
MAX_TTL_MS = 86_400_000
TERMINAL = frozenset({"completed", "failed", "cancelled"})

#: a progress report: (progress so far, total or None, message or None)
Progress = Callable[[float, float | None, str | None], Awaitable[None]]
#: runs one tool call to its result; it reports progress on the function it is given
RunCall = Callable[
    [ServerRequestContext[Any], types.CallToolRequestParams, Progress, str],
    Awaitable[types.CallToolResult],
]
#: refuses a call before a task is made (an unknown tool: a JSON-RPC error, no task)
Check = Callable[[ServerRequestContext[Any], types.CallToolRequestParams], Awaitable[None]]

CANCELLED_BECAUSE = "the MCP client cancelled the task or disconnected"
CANCELLED_RESULT = (
    "gate: The task was cancelled before it finished, so the call was withdrawn at gate and "
    "will not run, even if someone approves it later. If the tool had already started, the "
    "upstream server was told to cancel it."
)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Job:
    """One task: its state as the client sees it, and the result once there is one."""

    def __init__(self, ttl_ms: int) -> None:
        self.task_id = str(uuid.uuid4())
        self.created_at = self.updated_at = _now()
        self.status: types.TaskStatus = "working"
        self.message: str | None = "Asking gate whether this call may run."
        self.ttl_ms = ttl_ms
        self.started = time.monotonic()
        self.result: types.CallToolResult | None = None
        self.error: MCPError | None = None
        self.done = anyio.Event()  # terminal: tasks/result may answer
        self.stopped = anyio.Event()  # the work itself has ended (withdrawal included)
        self.scope = anyio.CancelScope()

    def task(self) -> dict[str, Any]:
        """The task as the wire shows it (`ttl` always present, a number)."""
        return types.Task(
            task_id=self.task_id,
            status=self.status,
            status_message=self.message,
            created_at=self.created_at,
            last_updated_at=self.updated_at,
            ttl=self.ttl_ms,
            poll_interval=POLL_MS,
        ).model_dump(by_alias=True, mode="json", exclude_none=True)

    def finish(
        self,
        status: types.TaskStatus,
        message: str | None,
        result: types.CallToolResult | None = None,
        error: MCPError | None = None,
    ) -> None:
        """Move to a terminal status, once: a cancelled task stays cancelled."""
        if self.status in TERMINAL:
            return
        self.status, self.message = status, message
        self.result, self.error = result, error
        self.updated_at = _now()
        self.done.set()

    def expired(self, now: float) -> bool:
        """Past its ttl and finished: it may be forgotten."""
        return self.status in TERMINAL and now - self.started > self.ttl_ms / 1000


class Tasks:
    """The tasks of one server process, and the handlers that serve them."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.jobs: dict[str, Job] = {}
        #: the server's task group (set by `gate.mcp.serving.serve_stdio`): tasks run in it
        self.group: TaskGroup | None = None

    @staticmethod
    def capability() -> types.ServerTasksCapability:
        """What the servers declare: task-augmented tools/call, and tasks/cancel."""
        return types.ServerTasksCapability(
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )

    @staticmethod
    def offered(tool: types.Tool) -> types.Tool:
        """The tool as listed to the client: a task is optional for it."""
        return tool.model_copy(update={"execution": types.ToolExecution(task_support="optional")})

    def install(self, server: Server[Any], run: RunCall, check: Check | None = None) -> None:
        """Serve tasks on `server`: task-augmented tools/call, tasks/get|result|cancel."""

        async def middleware(ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
            params = ctx.params
            if ctx.method != "tools/call" or not isinstance(params, Mapping):
                return await call_next(ctx)
            if params.get("task") is None:
                return await call_next(ctx)
            return await self._create(ctx, params, run, check)

        server.middleware.append(middleware)
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)

    async def _create(
        self,
        ctx: ServerRequestContext[Any],
        raw: Mapping[str, Any],
        run: RunCall,
        check: Check | None,
    ) -> dict[str, Any]:
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError:
            raise MCPError(types.INVALID_PARAMS, "Invalid tools/call parameters") from None
        if self.group is None:  # not serving: refuse rather than start work nobody can stop
            raise MCPError(types.INTERNAL_ERROR, f"{self.what} cannot run tasks now")
        if check is not None:
            await check(ctx, params)
        asked = params.task.ttl if params.task is not None else None
        ttl = DEFAULT_TTL_MS if asked is None else max(0, min(int(asked), MAX_TTL_MS))
        self._forget_expired()
        job = Job(ttl)
        self.jobs[job.task_id] = job
        token = ctx.meta.get("progress_token") if ctx.meta is not None else None

        async def progress(value: float, total: float | None, message: str | None) -> None:
            job.message, job.updated_at = message, _now()
            if token is None:
                return
            note = types.ProgressNotification(
                params=types.ProgressNotificationParams(
                    progress_token=token,
                    progress=value,
                    total=total,
                    message=message,
                    _meta={RELATED: {"taskId": job.task_id}},
                )
            )
            await ctx.session.send_notification(note)

        self.group.start_soon(self._work, job, run, ctx, params, progress)
        return {
            "task": job.task(),
            "_meta": {
                IMMEDIATE: "This call is waiting for a person to approve it in gate; "
                "its result comes when they decide."
            },
        }

    async def _work(
        self,
        job: Job,
        run: RunCall,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        progress: Progress,
    ) -> None:
        try:
            with job.scope:
                try:
                    result = await run(ctx, params, progress, CANCELLED_BECAUSE)
                except MCPError as exc:
                    job.finish("failed", exc.message, error=exc)
                except Exception as exc:  # fail closed on our own bugs: the call did not run
                    sys.stderr.write(f"{self.what}: task {job.task_id} failed: {exc!r}\n")
                    text = f"gate: The call could not be decided ({exc!r}), so it was blocked."
                    job.finish("failed", text, result=_error(text))
                else:
                    status: types.TaskStatus = "failed" if result.is_error else "completed"
                    job.finish(status, _summary(result), result=result)
        finally:
            job.finish("cancelled", CANCELLED_RESULT, result=_error(CANCELLED_RESULT))
            job.stopped.set()

    def _job(self, task_id: str) -> Job:
        self._forget_expired()
        job = self.jobs.get(task_id)
        if job is None:
            raise MCPError(types.INVALID_PARAMS, f"Failed to retrieve task: no task {task_id!r}")
        return job

    def _forget_expired(self) -> None:
        now = time.monotonic()
        for task_id in [k for k, job in self.jobs.items() if job.expired(now)]:
            del self.jobs[task_id]

    async def _get(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        return self._job(params.task_id).task()

    async def _result(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        job = self._job(params.task_id)
        await job.done.wait()  # the spec's tasks/result blocks until the task is terminal
        if job.error is not None:
            raise job.error
        result = job.result or _error(CANCELLED_RESULT)
        meta = {**(result.meta or {}), RELATED: {"taskId": job.task_id}}
        dumped = result.model_copy(update={"meta": meta})
        return dumped.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _cancel(
        self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        job = self._job(params.task_id)
        if job.status in TERMINAL:
            raise MCPError(types.INVALID_PARAMS, f"Cannot cancel task: it is already {job.status}")
        job.finish("cancelled", CANCELLED_RESULT, result=_error(CANCELLED_RESULT))
        job.scope.cancel()
        # Answer once the gate request is withdrawn, so an approver who acts after this
        # answer finds it withdrawn (the withdrawal itself is bounded by CANCEL_TIMEOUT).
        with anyio.move_on_after(CANCEL_TIMEOUT + 2):
            await job.stopped.wait()
        return job.task()


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=clip(text))], is_error=True)


def _summary(result: types.CallToolResult) -> str:
    text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
    return clip(text or ("The call failed." if result.is_error else "The call ran."))
