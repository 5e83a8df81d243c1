//! Whatever goes wrong between the agent and gate, the call is blocked and the model is told why.

mod common;

use gate_omni_hook::{GateHook, HookContext, HookHandler, HookResult, Json};
use std::time::{Duration, Instant};

fn exec() -> HookContext {
    HookContext::before_tool_call(
        "exec",
        Json::object([("command", Json::from("rm -rf build"))]),
    )
}

fn blocked(hook: &GateHook) -> String {
    match hook.handle(exec()) {
        HookResult::Block { reason } => reason,
        other => panic!("the call was let through: {other:?}"),
    }
}

#[test]
fn gate_binary_missing() {
    let reason = blocked(&GateHook::new().program("/nonexistent/bin/gate"));
    assert!(
        reason.contains("cannot start /nonexistent/bin/gate"),
        "{reason}"
    );
}

#[test]
fn server_down() {
    // The real gate hook, pointed at a port nothing listens on.
    let url = format!("http://127.0.0.1:{}", common::closed_port());
    let hook = GateHook::new()
        .program(common::gate_bin())
        .url(&url)
        .token(common::AGENT)
        .wait(Duration::from_secs(5));
    let reason = blocked(&hook);
    assert!(reason.contains(&url), "{reason}");
    assert!(reason.contains("blocked"), "{reason}");
}

#[test]
fn a_bad_token_blocks() {
    let server = common::GateServer::start();
    let hook = GateHook::new()
        .program(common::gate_bin())
        .url(&server.url)
        .token("tok-not-a-real-token")
        .wait(Duration::from_secs(5));
    let reason = blocked(&hook);
    assert!(reason.contains("token"), "{reason}");
}

#[cfg(unix)]
mod scripted {
    //! Stand-ins for `gate` that misbehave in one way each.

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn fake_gate(dir: &common::TempDir, body: &str) -> GateHook {
        let path = dir.path().join("gate");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        GateHook::new().program(path)
    }

    #[test]
    fn garbage_output() {
        let dir = common::TempDir::new("garbage");
        let reason = blocked(&fake_gate(
            &dir,
            "cat >/dev/null; echo 'Traceback: oops'; exit 0",
        ));
        assert!(
            reason.contains("without a readable JSON answer"),
            "{reason}"
        );
        assert!(reason.contains("Traceback: oops"), "{reason}");
    }

    #[test]
    fn a_crash_even_with_allow_on_stdout() {
        let dir = common::TempDir::new("crash");
        let hook = fake_gate(&dir, r#"cat >/dev/null; echo '{"continue": true}'; exit 1"#);
        assert!(blocked(&hook).contains("exited with status 1"));
    }

    #[test]
    fn continue_false_with_exit_zero() {
        let dir = common::TempDir::new("mixed");
        let hook = fake_gate(&dir, r#"cat >/dev/null; echo '{"continue": false}'"#);
        assert!(blocked(&hook).contains("did not say continue: true"));
    }

    #[test]
    fn a_hang_past_the_deadline_is_killed() {
        let dir = common::TempDir::new("hang");
        // `exec` so the kill reaches the sleeping process itself, not a shell around it.
        let hook = fake_gate(&dir, "exec sleep 60")
            .wait(Duration::from_millis(300))
            .grace(Duration::from_millis(300));
        let started = Instant::now();
        let reason = blocked(&hook);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
        assert!(reason.contains("still running"), "{reason}");
    }
}
