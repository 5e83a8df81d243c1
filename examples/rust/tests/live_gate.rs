//! GateHook against a real `gate serve`: policy answers, a person's approve / reject / edit,
//! and an agent loop that runs the tool only when the hook pipeline continues.

mod common;

use common::{GateServer, AGENT};
use gate_omni_hook::{
    GateHook, HookContext, HookHandler, HookPoint, HookRegistry, HookResult, Json,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

fn hook(server: &GateServer) -> GateHook {
    GateHook::new()
        .program(common::gate_bin())
        .url(&server.url)
        .token(AGENT)
        .agent_id("omni-agent")
        .wait(Duration::from_secs(60))
}

fn session() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "omni-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn call(tool: &str, arguments: Json, session: &str) -> HookContext {
    let mut ctx = HookContext::before_tool_call(tool, arguments);
    ctx.session_id = Some(session.to_string());
    ctx
}

fn command(text: &str) -> Json {
    Json::object([("command", Json::from(text))])
}

/// The agent loop's tool step: run the (possibly edited) call only on Continue.
fn agent_step(registry: &HookRegistry, ctx: HookContext, ran: &mut Vec<Json>) -> HookResult {
    let result = registry.run(ctx);
    if let HookResult::Continue(approved) = &result {
        ran.push(
            approved
                .tool_call
                .as_ref()
                .expect("a tool call")
                .arguments
                .clone(),
        );
    }
    result
}

#[test]
fn policy_and_people_decide_what_runs() {
    let server = GateServer::start();
    let mut registry = HookRegistry::new();
    registry.register_modifying(HookPoint::BeforeToolCall, 10, hook(&server));
    let mut ran = Vec::new();

    // Policy alone: an allow rule continues at once, a deny rule blocks with its reason.
    let read = call(
        "read_file",
        Json::object([("path", Json::from("/etc/hosts"))]),
        &session(),
    );
    assert!(matches!(
        agent_step(&registry, read, &mut ran),
        HookResult::Continue(_)
    ));
    let drop = call(
        "db_drop",
        Json::object([("table", Json::from("users"))]),
        &session(),
    );
    match agent_step(&registry, drop, &mut ran) {
        HookResult::Block { reason } => {
            assert!(
                reason.contains("Dropping tables is never done by agents"),
                "{reason}"
            )
        }
        other => panic!("db_drop was not blocked: {other:?}"),
    }
    assert_eq!(ran.len(), 1);

    // No rule covers the call: gate defers, which lets it run, unless the hook says deny.
    let note = || {
        call(
            "write_note",
            Json::object([("text", Json::from("hi"))]),
            &session(),
        )
    };
    assert!(matches!(
        hook(&server).handle(note()),
        HookResult::Continue(_)
    ));
    let strict = hook(&server).on_no_rule("deny");
    assert!(matches!(strict.handle(note()), HookResult::Block { .. }));

    // A person approves: the call runs as asked.
    let s = session();
    let decided = {
        let s = s.clone();
        let url = server.url.clone();
        thread::spawn(move || decide_when_pending(&url, "exec", &s, approve("looks fine")))
    };
    let result = agent_step(&registry, call("exec", command("make test"), &s), &mut ran);
    decided.join().unwrap();
    assert!(matches!(result, HookResult::Continue(_)), "{result:?}");
    assert_eq!(ran.last(), Some(&command("make test")));

    // A person rejects: the call does not run and the model reads who said no and why.
    let s = session();
    let decided = {
        let s = s.clone();
        let url = server.url.clone();
        let reject = Json::object([
            ("verdict", Json::from("reject")),
            ("comment", Json::from("not on a Friday")),
        ]);
        thread::spawn(move || decide_when_pending(&url, "exec", &s, reject))
    };
    let before = ran.len();
    let result = agent_step(
        &registry,
        call("exec", command("make deploy"), &s),
        &mut ran,
    );
    decided.join().unwrap();
    match result {
        HookResult::Block { reason } => {
            assert!(reason.contains("Rejected by alice"), "{reason}");
            assert!(reason.contains("not on a Friday"), "{reason}");
        }
        other => panic!("a rejected call continued: {other:?}"),
    }
    assert_eq!(ran.len(), before);

    // A person edits, then approves: the edited arguments are what runs.
    let s = session();
    let edited = command("make deploy ENV=staging");
    let decided = {
        let s = s.clone();
        let url = server.url.clone();
        let body = Json::object([
            ("verdict", Json::from("approve")),
            ("edited_args", edited.clone()),
        ]);
        thread::spawn(move || decide_when_pending(&url, "exec", &s, body))
    };
    let result = agent_step(
        &registry,
        call("exec", command("make deploy ENV=prod"), &s),
        &mut ran,
    );
    decided.join().unwrap();
    assert!(matches!(result, HookResult::Continue(_)), "{result:?}");
    assert_eq!(ran.last(), Some(&edited));
}

#[test]
fn nobody_answering_blocks_and_withdraws_the_request() {
    let server = GateServer::start();
    let s = session();
    let quick = hook(&server).wait(Duration::from_secs(2));
    let result = quick.handle(call("exec", command("sleep 1"), &s));
    let HookResult::Block { reason } = result else {
        panic!("{result:?}")
    };
    assert!(reason.contains("Nobody answered"), "{reason}");
    assert!(reason.contains("No human rejected it"), "{reason}");
    // The request ended with the wait (expired, or withdrawn by the hook): no approver is left
    // looking at a call nobody waits for, and a late click cannot approve it.
    let path = format!("/v1/requests?session_id={s}");
    let (_, body) = common::http("GET", &server.url, &path, Some(common::ALICE), None).unwrap();
    let items = body.get("items").and_then(Json::as_array).unwrap();
    assert_eq!(items.len(), 1);
    let status = items[0].get("status").and_then(Json::as_str);
    assert!(matches!(status, Some("expired" | "cancelled")), "{body}");
}

fn approve(comment: &str) -> Json {
    Json::object([
        ("verdict", Json::from("approve")),
        ("comment", Json::from(comment)),
    ])
}

/// What the approver does: wait for the hook's request to show up, then decide it.
fn decide_when_pending(url: &str, tool: &str, session: &str, body: Json) {
    let path = format!("/v1/requests?status=pending&tool_name={tool}&session_id={session}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = common::http("GET", url, &path, Some(common::ALICE), None).unwrap();
        let first = list
            .get("items")
            .and_then(Json::as_array)
            .and_then(|a| a.first().cloned());
        if let Some(request) = first {
            let id = request
                .get("id")
                .and_then(Json::as_str)
                .unwrap()
                .to_string();
            let decision = format!("/v1/requests/{id}/decision");
            let (status, reply) =
                common::http("POST", url, &decision, Some(common::ALICE), Some(&body)).unwrap();
            assert_eq!(status, 200, "{reply}");
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pending {tool} request"
        );
        thread::sleep(Duration::from_millis(50));
    }
}
