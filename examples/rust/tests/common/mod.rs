//! A live `gate serve` for the tests, started by the tests themselves, and a tiny HTTP client.

#![allow(dead_code)] // each test file uses part of this

use gate_omni_hook::Json;
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

pub const AGENT: &str = "tok-agent-omni";
pub const ALICE: &str = "tok-approver-alice";

const CONFIG: &str = r#"
[server]
database_url = "sqlite:///{DB}"
sweep_interval_seconds = 0.2

[[approvers]]
name = "alice"
groups = ["ops"]

[[tokens]]
name = "omni-agent"
role = "agent"
token = "tok-agent-omni"

[[tokens]]
name = "alice"
role = "approver"
token = "tok-approver-alice"
approver = "alice"

[[rules]]
name = "reads"
tools = ["read_*"]
action = "allow"

[[rules]]
name = "no-drops"
tools = ["db_drop"]
action = "deny"
reason = "Dropping tables is never done by agents"

[[rules]]
name = "shell"
tools = ["exec"]
approvers = ["group:ops"]
timeout = "10m"
reason = "Shell commands need a person"
"#;

/// A directory of its own under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "gate-omni-{tag}-{}-{n}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The `gate` executable: `$GATE_BIN`, else the repository's `.venv/bin/gate`.
pub fn gate_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("GATE_BIN") {
        return PathBuf::from(bin);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/gate");
    assert!(
        venv.exists(),
        "these tests run a real `gate serve`: set GATE_BIN to gate's executable, or create the \
         repository's .venv (python3 -m venv .venv && .venv/bin/pip install -e .)"
    );
    venv
}

/// A port nothing listens on (it was free a moment ago).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `gate serve` on a free loopback port with the rules above; stopped on drop.
pub struct GateServer {
    pub url: String,
    child: Child,
    dir: TempDir,
}

impl GateServer {
    pub fn start() -> GateServer {
        let dir = TempDir::new("serve");
        let config = dir.path().join("gate.toml");
        let db = dir.path().join("gate.db");
        fs::write(&config, CONFIG.replace("{DB}", db.to_str().unwrap())).unwrap();
        let log_path = dir.path().join("serve.log");
        let log = fs::File::create(&log_path).unwrap();
        let child = Command::new(gate_bin())
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start gate serve");
        let mut server = GateServer {
            url: String::new(),
            child,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let marker = "Uvicorn running on http://127.0.0.1:";
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("gate serve exited with {status}:\n{}", server.log());
            }
            let text = server.log();
            if let Some(at) = text.find(marker) {
                let port: String = text[at + marker.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                server.url = format!("http://127.0.0.1:{port}");
                if matches!(
                    http("GET", &server.url, "/healthz", None, None),
                    Ok((200, _))
                ) {
                    return server;
                }
            }
            assert!(
                Instant::now() < deadline,
                "gate serve did not start:\n{}",
                server.log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// The pending request for `tool` in `session`, once the hook has created it.
    pub fn wait_pending(&self, tool: &str, session: &str) -> Json {
        let path = format!("/v1/requests?status=pending&tool_name={tool}&session_id={session}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = http("GET", &self.url, &path, Some(ALICE), None).unwrap();
            assert_eq!(status, 200, "{body}");
            if let Some(first) = body
                .get("items")
                .and_then(Json::as_array)
                .and_then(|a| a.first())
            {
                return first.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no pending {tool} request in session {session}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Decide request `id` as alice; `body` is the decision JSON.
    pub fn decide(&self, id: &str, body: Json) {
        let path = format!("/v1/requests/{id}/decision");
        let (status, reply) = http("POST", &self.url, &path, Some(ALICE), Some(&body)).unwrap();
        assert_eq!(status, 200, "{reply}");
    }

    /// The stored request `id`.
    pub fn request(&self, id: &str) -> Json {
        let (status, body) = http(
            "GET",
            &self.url,
            &format!("/v1/requests/{id}"),
            Some(ALICE),
            None,
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
        body
    }
}

impl Drop for GateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request with `Connection: close`: (status, JSON body or Null).
pub fn http(
    method: &str,
    base: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Json>,
) -> std::io::Result<(u16, Json)> {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let payload = body.map(Json::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        payload.len()
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    stream.write_all(format!("{head}\r\n{payload}").as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "this client reads Content-Length bodies only"
    );
    Ok((status, Json::parse(body).unwrap_or(Json::Null)))
}
