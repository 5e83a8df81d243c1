//! A gate hook for Omni-style Rust agents, with the standard library only.
//!
//! Omni blocks a tool call when a `BeforeToolCall` handler returns
//! `HookResult::Block { reason }`; the reason goes back to the model as a `HookBlocked` error.
//! [`GateHook`] is such a handler: it runs `gate hook --format command` (which asks the gate
//! server, long-polls while a person decides, and withdraws the request when its own deadline
//! passes) with the call as JSON on stdin, and maps the answer:
//!
//! | gate says                                  | handler returns                           |
//! | ------------------------------------------ | ----------------------------------------- |
//! | exit 0, `{"continue": true, ...}`          | `Continue(ctx)`                           |
//! | ... with `"updatedInput"` (approver edits) | `Continue(ctx)` with those arguments      |
//! | exit 2, `{"continue": false, "reason"}`    | `Block { reason }` (the model reads it)   |
//! | anything else: no binary, gate down, a crash, unreadable or missing output, a hang past the deadline | `Block` saying why |
//!
//! The types below mirror Omni's hook API (`HookPoint`, `HookContext`, `ToolCallInfo`,
//! `HookResult::{Continue, Block}`, a `HookHandler` trait and a priority-ordered
//! `HookRegistry`), so the handler drops into an Omni build with the field types swapped
//! (`Json` for `serde_json::Value`). Omni's `handle` is `async`; this one blocks while a person
//! decides, so call it from `tokio::task::spawn_blocking` there.
//!
//! ```no_run
//! use gate_omni_hook::{GateHook, HookContext, HookPoint, HookRegistry, HookResult, Json};
//! use std::time::Duration;
//!
//! let mut registry = HookRegistry::new();
//! let gate = GateHook::new().agent_id("omni-agent").wait(Duration::from_secs(540));
//! registry.register_modifying(HookPoint::BeforeToolCall, 10, gate);
//!
//! let call = Json::object([("command", Json::from("make deploy"))]);
//! match registry.run(HookContext::before_tool_call("exec", call)) {
//!     HookResult::Continue(ctx) => { /* run ctx.tool_call: the arguments a person approved */ }
//!     HookResult::Block { reason } => { /* do not run; give `reason` to the model */ }
//! }
//! ```

pub mod json;

pub use json::Json;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Where in the agent loop a hook fires (Omni's seven hook points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookPoint {
    MessageReceived,
    LlmInput,
    LlmOutput,
    BeforeToolCall,
    AfterToolCall,
    SessionStart,
    SessionEnd,
}

/// The tool call a `BeforeToolCall` hook is asked about.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallInfo {
    /// The model's id for this call, when the runtime has one: gate's idempotency key, so a
    /// retried hook waits on the same request instead of asking people twice.
    pub id: Option<String>,
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: Json,
}

/// One message of the conversation (for `LlmInput`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// What every hook receives.
#[derive(Clone, Debug, PartialEq)]
pub struct HookContext {
    pub hook_point: HookPoint,
    pub session_id: Option<String>,
    pub text: Option<String>,
    pub tool_call: Option<ToolCallInfo>,
    pub messages: Option<Vec<ChatMessage>>,
    pub metadata: Json,
}

impl HookContext {
    /// A `BeforeToolCall` context for `name(arguments)`.
    pub fn before_tool_call(name: &str, arguments: Json) -> HookContext {
        HookContext {
            hook_point: HookPoint::BeforeToolCall,
            session_id: None,
            text: None,
            tool_call: Some(ToolCallInfo {
                id: None,
                name: name.to_string(),
                arguments,
            }),
            messages: None,
            metadata: Json::object::<String>([]),
        }
    }
}

/// What a modifying hook returns.
#[derive(Clone, Debug, PartialEq)]
pub enum HookResult {
    /// Go on, with this (possibly modified) context.
    Continue(HookContext),
    /// Stop the pipeline; for `BeforeToolCall` the tool does not run and the model gets `reason`.
    Block { reason: String },
}

/// A hook handler (Omni's trait, minus `async`).
pub trait HookHandler: Send + Sync {
    /// Inspect the context; continue (maybe modified) or block.
    fn handle(&self, ctx: HookContext) -> HookResult;
}

/// Modifying hooks by hook point, run in priority order (lowest first); the first `Block`
/// stops the pipeline, like Omni's registry.
#[derive(Default)]
pub struct HookRegistry {
    hooks: Vec<(HookPoint, i32, Box<dyn HookHandler>)>,
}

impl HookRegistry {
    /// An empty registry.
    pub fn new() -> HookRegistry {
        HookRegistry::default()
    }

    /// Add a modifying hook at `point` with `priority` (lower runs first).
    pub fn register_modifying(
        &mut self,
        point: HookPoint,
        priority: i32,
        handler: impl HookHandler + 'static,
    ) {
        self.hooks.push((point, priority, Box::new(handler)));
        // Stable: hooks of equal priority keep their registration order.
        self.hooks.sort_by_key(|(_, priority, _)| *priority);
    }

    /// Run the hooks of `ctx.hook_point` in order, each on the previous one's output.
    pub fn run(&self, mut ctx: HookContext) -> HookResult {
        for (point, _, handler) in &self.hooks {
            if *point != ctx.hook_point {
                continue;
            }
            match handler.handle(ctx) {
                HookResult::Continue(next) => ctx = next,
                block @ HookResult::Block { .. } => return block,
            }
        }
        HookResult::Continue(ctx)
    }
}

/// gate's answer about one call.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Run it; with `updated`, run it with these arguments (an approver edited them).
    Allow {
        reason: String,
        updated: Option<Json>,
    },
    /// Do not run it; `reason` is for the model.
    Block { reason: String },
}

/// A `BeforeToolCall` handler that asks gate through `gate hook --format command`.
#[derive(Clone, Debug)]
pub struct GateHook {
    program: PathBuf,
    url: Option<String>,
    token: Option<String>,
    agent_id: Option<String>,
    on_no_rule: Option<String>,
    wait: Duration,
    grace: Duration,
}

/// Default wait for a person, in seconds: gate hook's own default.
const DEFAULT_WAIT: Duration = Duration::from_secs(540);
// `gate hook` withdraws its request and answers when `wait` passes; the child is killed only if
// it is still running this long after that (a hung interpreter, a stuck pipe).
const DEFAULT_GRACE: Duration = Duration::from_secs(15);
// gate's answer is one short JSON line; more than this is not gate talking.
const MAX_OUTPUT: u64 = 1 << 20;

impl Default for GateHook {
    fn default() -> GateHook {
        GateHook::new()
    }
}

impl GateHook {
    /// `gate` from `$GATE_BIN` or the PATH; URL and token from `$GATE_URL` / `$GATE_TOKEN`.
    pub fn new() -> GateHook {
        let program =
            std::env::var_os("GATE_BIN").map_or_else(|| PathBuf::from("gate"), PathBuf::from);
        GateHook {
            program,
            url: None,
            token: None,
            agent_id: None,
            on_no_rule: None,
            wait: DEFAULT_WAIT,
            grace: DEFAULT_GRACE,
        }
    }

    /// The `gate` executable to run.
    pub fn program(mut self, program: impl Into<PathBuf>) -> GateHook {
        self.program = program.into();
        self
    }

    /// The gate server (else `$GATE_URL`, else gate's default).
    pub fn url(mut self, url: &str) -> GateHook {
        self.url = Some(url.to_string());
        self
    }

    /// The agent token (else `$GATE_TOKEN`).
    pub fn token(mut self, token: &str) -> GateHook {
        self.token = Some(token.to_string());
        self
    }

    /// The agent id gate records (`--agent-id`).
    pub fn agent_id(mut self, agent_id: &str) -> GateHook {
        self.agent_id = Some(agent_id.to_string());
        self
    }

    /// What happens when no rule matches (`--on-no-rule`: defer/allow continue, deny blocks).
    pub fn on_no_rule(mut self, choice: &str) -> GateHook {
        self.on_no_rule = Some(choice.to_string());
        self
    }

    /// How long to wait for a person before gate withdraws the request and blocks.
    pub fn wait(mut self, wait: Duration) -> GateHook {
        self.wait = wait;
        self
    }

    /// How long past `wait` the child may run before it is killed (and the call blocked).
    pub fn grace(mut self, grace: Duration) -> GateHook {
        self.grace = grace;
        self
    }

    /// Ask gate about `call`. Never panics and never allows on a failure: every error blocks.
    pub fn check(&self, call: &ToolCallInfo, session_id: Option<&str>) -> Verdict {
        let mut payload = vec![
            ("event", Json::from("BeforeToolCall")),
            ("tool_name", Json::from(call.name.as_str())),
            ("tool_input", call.arguments.clone()),
        ];
        if let Some(id) = &call.id {
            payload.push(("tool_use_id", Json::from(id.as_str())));
        }
        if let Some(session) = session_id {
            payload.push(("session_id", Json::from(session)));
        }
        match self.run(&Json::object(payload).to_string()) {
            Ok((status, stdout, stderr)) => interpret(status.code(), &stdout, &stderr),
            Err(why) => Verdict::Block {
                reason: format!(
                    "gate: The approval check could not run ({why}), so this {} call was blocked \
                     to be safe. Nobody reviewed it. Tell the user the gate hook is broken.",
                    call.name
                ),
            },
        }
    }

    fn run(&self, input: &str) -> Result<(ExitStatus, String, String), String> {
        let mut command = Command::new(&self.program);
        command
            .args(["hook", "--format", "command", "--timeout"])
            .arg(format!("{}", self.wait.as_secs_f64()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(agent) = &self.agent_id {
            command.args(["--agent-id", agent]);
        }
        if let Some(choice) = &self.on_no_rule {
            command.args(["--on-no-rule", choice]);
        }
        if let Some(url) = &self.url {
            command.env("GATE_URL", url);
        }
        if let Some(token) = &self.token {
            command.env("GATE_TOKEN", token);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        // Every pipe gets its own thread: a child that does not read its input, or fills one
        // output while we wait on the other, must not hang the agent past the deadline.
        let input = input.as_bytes().to_vec();
        let writer = thread::spawn(move || {
            let mut stdin = stdin;
            stdin.write_all(&input)
            // dropped here: gate sees the end of its input
        });
        let out = thread::spawn(move || drain(stdout));
        let err = thread::spawn(move || drain(stderr));
        let deadline = Instant::now() + self.wait + self.grace;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "gate hook was still running {:.0} s after its deadline and was stopped",
                        self.grace.as_secs_f64()
                    ));
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("cannot wait for gate hook: {e}"));
                }
            }
        };
        // gate never answers about a call it did not fully read, but if the write failed we
        // cannot know what it saw: no answer counts then.
        match writer.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("cannot write the call to gate hook: {e}")),
            Err(_) => return Err("the stdin writer panicked".to_string()),
        }
        let stdout = out.join().map_err(|_| "stdout reader panicked")?;
        let stderr = err.join().map_err(|_| "stderr reader panicked")?;
        Ok((status, stdout, stderr))
    }
}

fn drain(pipe: impl Read) -> String {
    let mut bytes = Vec::new();
    let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Map `gate hook --format command`'s exit code and output to a verdict, failing closed.
pub fn interpret(code: Option<i32>, stdout: &str, stderr: &str) -> Verdict {
    let answer = Json::parse(stdout.trim()).ok().filter(Json::is_object);
    let reason = answer
        .as_ref()
        .and_then(|a| a.get("reason"))
        .and_then(Json::as_str);
    match code {
        Some(0) => {
            let Some(answer) = &answer else {
                return broken("exited 0 without a readable JSON answer", stdout, stderr);
            };
            if answer.get("continue").and_then(Json::as_bool) != Some(true) {
                return broken("exited 0 but did not say continue: true", stdout, stderr);
            }
            let updated = answer.get("updatedInput").cloned();
            if updated.as_ref().is_some_and(|u| !u.is_object()) {
                // An edit we cannot apply must not run the unedited call instead.
                return broken(
                    "sent edited arguments that are not an object",
                    stdout,
                    stderr,
                );
            }
            Verdict::Allow {
                reason: reason.unwrap_or("").to_string(),
                updated,
            }
        }
        Some(2) => {
            let reason = reason
                .map(str::to_string)
                .or_else(|| Some(stderr.trim().to_string()).filter(|s| !s.is_empty()))
                .unwrap_or_else(|| "gate: The call was blocked (no reason given).".to_string());
            Verdict::Block { reason }
        }
        Some(other) => broken(&format!("exited with status {other}"), stdout, stderr),
        None => broken("was killed by a signal", stdout, stderr),
    }
}

fn broken(what: &str, stdout: &str, stderr: &str) -> Verdict {
    let first = |s: &str| {
        s.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string)
    };
    let detail = first(stderr)
        .or_else(|| first(stdout))
        .unwrap_or_else(|| "no output".into());
    let detail: String = detail.chars().take(300).collect();
    Verdict::Block {
        reason: format!(
            "gate: The gate hook {what} ({detail}), so the call was blocked to be safe. Nobody \
             reviewed it. Tell the user the gate hook or server is failing."
        ),
    }
}

impl HookHandler for GateHook {
    fn handle(&self, mut ctx: HookContext) -> HookResult {
        if ctx.hook_point != HookPoint::BeforeToolCall {
            return HookResult::Continue(ctx);
        }
        let Some(call) = ctx.tool_call.as_mut() else {
            // Nothing to show a person means nothing anyone approved.
            return HookResult::Block {
                reason: "gate: A BeforeToolCall hook got no tool call, so nothing was approved."
                    .to_string(),
            };
        };
        match self.check(call, ctx.session_id.as_deref()) {
            Verdict::Allow { updated, .. } => {
                if let Some(arguments) = updated {
                    call.arguments = arguments;
                }
                HookResult::Continue(ctx)
            }
            Verdict::Block { reason } => HookResult::Block { reason },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(verdict: Verdict) -> String {
        match verdict {
            Verdict::Block { reason } => reason,
            allowed => panic!("expected a block, got {allowed:?}"),
        }
    }

    #[test]
    fn allow_and_edits() {
        let plain = interpret(
            Some(0),
            "{\"continue\": true, \"reason\": \"gate: ok\"}\n",
            "",
        );
        assert_eq!(
            plain,
            Verdict::Allow {
                reason: "gate: ok".into(),
                updated: None
            }
        );
        let edited = interpret(
            Some(0),
            r#"{"continue": true, "reason": "r", "updatedInput": {"command": "ls"}}"#,
            "",
        );
        let expected = Json::object([("command", Json::from("ls"))]);
        assert_eq!(
            edited,
            Verdict::Allow {
                reason: "r".into(),
                updated: Some(expected)
            }
        );
    }

    #[test]
    fn blocks_carry_gates_reason() {
        let stdout = r#"{"continue": false, "reason": "gate: Rejected by alice"}"#;
        assert_eq!(
            reason(interpret(Some(2), stdout, "other")),
            "gate: Rejected by alice"
        );
        assert_eq!(
            reason(interpret(Some(2), "", "from stderr\n")),
            "from stderr"
        );
        assert!(reason(interpret(Some(2), "", "")).contains("blocked"));
    }

    #[test]
    fn anything_unexpected_blocks() {
        for (code, stdout) in [
            (Some(0), ""),
            (Some(0), "garbage"),
            (Some(0), "[true]"),
            (Some(0), r#"{"continue": false}"#),
            (Some(0), r#"{"continue": "yes"}"#),
            (Some(0), r#"{"continue": true, "updatedInput": "rm -rf /"}"#),
            (Some(1), r#"{"continue": true}"#),
            (Some(127), ""),
            (None, r#"{"continue": true}"#),
        ] {
            let text = reason(interpret(code, stdout, "Traceback ..."));
            assert!(
                text.contains("blocked to be safe"),
                "{code:?} {stdout:?}: {text}"
            );
        }
    }

    #[test]
    fn other_hook_points_pass_and_a_missing_call_blocks() {
        let hook = GateHook::new().program("/nonexistent/gate");
        let mut ctx = HookContext::before_tool_call("exec", Json::object::<String>([]));
        ctx.hook_point = HookPoint::LlmOutput;
        assert_eq!(hook.handle(ctx.clone()), HookResult::Continue(ctx.clone()));
        ctx.hook_point = HookPoint::BeforeToolCall;
        ctx.tool_call = None;
        assert!(matches!(hook.handle(ctx), HookResult::Block { .. }));
    }

    struct Tag(&'static str);

    impl HookHandler for Tag {
        fn handle(&self, mut ctx: HookContext) -> HookResult {
            if self.0 == "block" {
                return HookResult::Block {
                    reason: "blocked by tag".into(),
                };
            }
            let seen = ctx.text.take().unwrap_or_default();
            ctx.text = Some(seen + self.0);
            HookResult::Continue(ctx)
        }
    }

    #[test]
    fn registry_runs_in_priority_order_and_stops_at_a_block() {
        let mut registry = HookRegistry::new();
        registry.register_modifying(HookPoint::BeforeToolCall, 20, Tag("b"));
        registry.register_modifying(HookPoint::BeforeToolCall, 10, Tag("a"));
        registry.register_modifying(HookPoint::LlmInput, 0, Tag("block"));
        let ctx = HookContext::before_tool_call("exec", Json::Null);
        match registry.run(ctx) {
            HookResult::Continue(out) => assert_eq!(out.text.as_deref(), Some("ab")),
            other => panic!("{other:?}"),
        }
        registry.register_modifying(HookPoint::BeforeToolCall, 15, Tag("block"));
        let blocked = registry.run(HookContext::before_tool_call("exec", Json::Null));
        assert_eq!(
            blocked,
            HookResult::Block {
                reason: "blocked by tag".into()
            }
        );
    }
}
