//! The targets and how one alert reaches each: a program, mail, an HTTP POST, syslog.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::{Alert, Severity, Targets};

/// syslog facility `daemon`.
const FACILITY_DAEMON: u8 = 3;
/// Reply bytes of a webhook read at most (only its status matters).
const WEBHOOK_REPLY_BYTES_MAX: usize = 64 << 10;

#[derive(Debug, Clone)]
pub(crate) enum Target {
    Program(PathBuf),
    Mail { to: String, command: Vec<String> },
    Webhook(hyper::Uri),
    Syslog(PathBuf),
}

impl Target {
    /// The targets `targets` configures, in a fixed order. A webhook URL that does not parse
    /// was refused by the configuration check already; here it is left out.
    pub fn all(targets: &Targets) -> Vec<Target> {
        let mut all = Vec::new();
        if let Some(program) = &targets.program {
            all.push(Target::Program(program.clone()));
        }
        if let Some(to) = &targets.mail_to {
            let command = targets
                .mail_command
                .split_whitespace()
                .map(str::to_string)
                .collect();
            all.push(Target::Mail {
                to: to.clone(),
                command,
            });
        }
        if let Some(uri) = targets.webhook.as_ref().and_then(|u| u.parse().ok()) {
            all.push(Target::Webhook(uri));
        }
        if targets.syslog {
            all.push(Target::Syslog(targets.syslog_socket.clone()));
        }
        all
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Target::Program(_) => "program",
            Target::Mail { .. } => "mail",
            Target::Webhook(_) => "webhook",
            Target::Syslog(_) => "syslog",
        }
    }

    /// What the target's thread sends with (a webhook's runtime is made once).
    pub fn sender(self) -> Sender {
        let runtime = matches!(self, Target::Webhook(_)).then(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime for the webhook")
        });
        Sender {
            target: self,
            runtime,
        }
    }
}

pub(crate) struct Sender {
    target: Target,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Sender {
    pub fn send(&mut self, alert: &Alert, timeout: Duration) -> Result<(), String> {
        match &self.target {
            Target::Program(program) => run_program(program, alert, timeout),
            Target::Mail { to, command } => mail(command, to, alert, timeout),
            Target::Webhook(uri) => {
                let runtime = self.runtime.as_ref().expect("made with the target");
                let body = serde_json::to_vec(alert).expect("an alert always serializes");
                runtime.block_on(async {
                    tokio::time::timeout(timeout, post(uri, body))
                        .await
                        .map_err(|_| format!("no answer within {timeout:?}"))?
                })
            }
            Target::Syslog(socket) => syslog(socket, alert),
        }
    }
}

/// `program EVENT ARRAY [MEMBER]`, the details in `RAIDKIT_*` environment variables.
fn run_program(program: &PathBuf, alert: &Alert, timeout: Duration) -> Result<(), String> {
    let mut command = Command::new(program);
    command.arg(alert.event.name()).arg(&alert.array);
    if let Some(member) = &alert.member {
        command.arg(member);
    }
    command
        .env("RAIDKIT_EVENT", alert.event.name())
        .env("RAIDKIT_ARRAY", &alert.array)
        .env("RAIDKIT_MEMBER", alert.member.as_deref().unwrap_or(""))
        .env("RAIDKIT_MESSAGE", &alert.message)
        .env("RAIDKIT_HOST", &alert.host)
        .env("RAIDKIT_TIME", &alert.time);
    for (key, value) in &alert.details {
        command.env(format!("RAIDKIT_{}", key.to_ascii_uppercase()), value);
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    finish(child, timeout, &program.display().to_string())
}

/// A mail with `To:` and `Subject:` headers on the command's stdin (`sendmail -t` reads the
/// recipients from the headers).
fn mail(command: &[String], to: &str, alert: &Alert, timeout: Duration) -> Result<(), String> {
    let (program, args) = command.split_first().ok_or("the mail command is empty")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let mut text = format!(
        "To: {to}\nSubject: raidkit {} event on array {} ({})\n\n{}\n\nhost: {}\ntime: {}\n",
        alert.event,
        alert.array,
        alert.host,
        alert.summary(),
        alert.host,
        alert.time
    );
    for (key, value) in &alert.details {
        text += &format!("{key}: {value}\n");
    }
    let written = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(text.as_bytes());
    let finished = finish(child, timeout, program);
    written.map_err(|e| format!("writing the mail to {program}: {e}"))?;
    finished
}

/// Waits for `child` at most `timeout`; kills it after that. Success is exit status 0.
fn finish(mut child: Child, timeout: Duration, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("{name} exited with {status}")),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{name} still ran after {timeout:?}; killed"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for {name}: {e}")),
        }
    }
}

/// One HTTP/1.1 POST of the alert's JSON; any 2xx status is delivered.
async fn post(uri: &hyper::Uri, body: Vec<u8>) -> Result<(), String> {
    let host = uri.host().ok_or("the webhook URL has no host")?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {host}:{port}: {e}"))?;
    let driver = tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = hyper::Request::builder()
        .method("POST")
        .uri(path)
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::USER_AGENT, "raidkit")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("building the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("POST {uri}: {e}"))?;
    let status = response.status();
    // Read (a bounded part of) the reply so the server sees the exchange through.
    let _ = Limited::new(response.into_body(), WEBHOOK_REPLY_BYTES_MAX)
        .collect()
        .await;
    driver.abort();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("POST {uri}: HTTP {status}"))
    }
}

/// One RFC 3164 line to the local syslog socket: `<PRI>raidkit[PID]: summary`.
fn syslog(path: &PathBuf, alert: &Alert) -> Result<(), String> {
    let severity = match alert.event.severity() {
        Severity::Critical => 2,
        Severity::Warning => 4,
        Severity::Info => 6,
    };
    let line = format!(
        "<{}>raidkit[{}]: {}",
        FACILITY_DAEMON * 8 + severity,
        std::process::id(),
        alert.summary()
    );
    let socket = UnixDatagram::unbound().map_err(|e| format!("syslog socket: {e}"))?;
    socket
        .send_to(line.as_bytes(), path)
        .map_err(|e| format!("sending to {}: {e}", path.display()))?;
    Ok(())
}
