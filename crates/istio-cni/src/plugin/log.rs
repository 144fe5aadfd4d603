//! The plugin's log. Standard output belongs to the CNI result, so the log is JSON lines on standard
//! error (the runtime's log) and appended to `istio-cni.log` in the run dir, which the node agent follows
//! into its own output (Istio tees to the agent's UDS and a rolling file in the same dir).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;

use super::conf::{PluginConf, LOG_NAME};

/// The log file is rolled to `istio-cni.log.1` past this size, so the node's disk use is bounded.
pub const MAX_LOG_BYTES: u64 = 8 << 20;

/// Standard error, and the file when it could be opened.
struct Tee {
    file: Option<Mutex<File>>,
}

struct TeeWriter<'a> {
    file: Option<&'a Mutex<File>>,
}

impl Write for TeeWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(file) = self.file {
            if let Ok(mut f) = file.lock() {
                // A full disk must not fail the pod: the line still reaches standard error.
                let _ = f.write_all(buf);
            }
        }
        io::stderr().write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for Tee {
    type Writer = TeeWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        TeeWriter {
            file: self.file.as_ref(),
        }
    }
}

fn open(dir: &Path) -> Option<File> {
    let path = dir.join(LOG_NAME);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let _ = std::fs::rename(&path, dir.join(format!("{LOG_NAME}.1")));
    }
    OpenOptions::new().create(true).append(true).open(path).ok()
}

/// Installs the log at the configuration's `plugin_log_level` (once per process).
pub fn install(conf: &PluginConf) {
    let level = match conf.entry.log_level.as_str() {
        "debug" => tracing::Level::DEBUG,
        "warn" => tracing::Level::WARN,
        "error" => tracing::Level::ERROR,
        "none" => return,
        _ => tracing::Level::INFO,
    };
    let file = if conf.entry.run_dir.is_dir() {
        open(&conf.entry.run_dir)
    } else {
        None
    };
    // Our crates at the configured level; the HTTP and TLS stack only when something is wrong.
    let targets = Targets::new()
        .with_target("istio_cni", level)
        .with_target("iptables_init", level)
        .with_default(tracing::Level::WARN);
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(level)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(Tee {
            file: file.map(Mutex::new),
        })
        .finish()
        .with(targets);
    let _ = tracing::subscriber::set_global_default(subscriber);
}
