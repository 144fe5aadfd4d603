//! `--url` and `clientConfig.url`: an `https://HOST[:PORT][/PATH]` URL, refused when it holds what would
//! end or split the HTTP request line.

use super::error::DoctorError;

/// An `https://HOST[:PORT][/PATH]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
}

/// The first control character (CR, LF, NUL, the rest of C0, DEL, C1) or space of `s`: written into
/// the HTTP request line, it would end the line or split the request, so no URL or path may hold one
/// (Go's `net/url` refuses control characters too, so the API server never sends them).
pub(super) fn forbidden_char(s: &str) -> Option<char> {
    s.chars().find(|c| c.is_control() || *c == ' ')
}

/// Parses an `https://` URL (the only scheme an admission webhook may use).
pub fn parse_url(s: &str) -> Result<Url, DoctorError> {
    let bad = |reason| DoctorError::Url {
        value: s.to_string(),
        reason,
    };
    if forbidden_char(s).is_some() {
        return Err(bad(
            "holds a control character or a space, which would be written into the HTTP request",
        ));
    }
    let rest = s
        .strip_prefix("https://")
        .ok_or_else(|| bad("must start with https://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6
            .find(']')
            .ok_or_else(|| bad("unclosed '[' in the host"))?;
        let port = v6[end + 1..].strip_prefix(':');
        (&v6[..end], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| bad("the port is not a number 1..65535"))?,
        None => 443,
    };
    Ok(Url {
        host: host.to_string(),
        port,
        path: path.map(str::to_string),
    })
}

/// `--url`'s parser: a bad value is a usage error (clap exits 2) that names the flag and shows the value
/// escaped, so a CR or LF in it cannot garble the terminal either (clap's own message prints it raw).
#[derive(Debug, Clone, Copy)]
pub(super) struct UrlArg;

impl clap::builder::TypedValueParser for UrlArg {
    type Value = Url;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Url, clap::Error> {
        let usage = |message: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{message}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| usage(format!("--url {:?}: not UTF-8", value.to_string_lossy())))?;
        parse_url(text).map_err(|e| usage(e.to_string()))
    }
}
