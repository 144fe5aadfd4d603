//! Reading a docker-archive image (what `scripts/images.sh build` writes and `ctr images import` reads):
//! its `manifest.json`, the image config and every layer's entries, with a small tar reader (ustar, pax
//! and GNU long names) so the checks share no code with the writer (`scripts/image-archive.py`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, ensure, Context as _, Result};
use serde_json::Value;

/// One entry of a tar stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The path without a leading `./` or `/`, and without a trailing `/`.
    pub name: String,
    /// `b'0'` file, `b'1'` hard link, `b'2'` symlink, `b'5'` directory, …
    pub kind: u8,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub link: String,
    /// The bytes of a regular file (empty for the rest).
    pub data: Vec<u8>,
}

impl Entry {
    pub fn is_file(&self) -> bool {
        self.kind == b'0' || self.kind == 0
    }
}

fn octal(field: &[u8]) -> Result<u64> {
    let text: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).with_context(|| format!("tar header number {text:?}"))
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn clean(name: &str) -> String {
    name.trim_start_matches("./")
        .trim_start_matches('/')
        .trim_end_matches('/')
        .to_string()
}

/// Parses pax extended-header records (`LEN key=value\n`).
fn pax_records(data: &[u8]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|b| *b == b' ')
            .context("pax record without a length")?;
        let len: usize = std::str::from_utf8(&rest[..space])?.parse()?;
        ensure!(len > space && len <= rest.len(), "pax record length {len}");
        let record = std::str::from_utf8(&rest[space + 1..len - 1])?;
        let (k, v) = record.split_once('=').context("pax record without =")?;
        out.insert(k.to_string(), v.to_string());
        rest = &rest[len..];
    }
    Ok(out)
}

/// Every entry of the tar stream `bytes`.
pub fn tar_entries(bytes: &[u8]) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut pax: BTreeMap<String, String> = BTreeMap::new();
    let mut long_name: Option<String> = None;
    let mut long_link: Option<String> = None;
    while at + 512 <= bytes.len() {
        let h = &bytes[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let size = octal(&h[124..136])? as usize;
        let kind = h[156];
        let data_start = at + 512;
        ensure!(
            data_start + size <= bytes.len(),
            "tar entry at {at} runs past the end"
        );
        let data = &bytes[data_start..data_start + size];
        at = data_start + size.div_ceil(512) * 512;
        match kind {
            b'x' => {
                pax = pax_records(data)?;
                continue;
            }
            b'g' => continue,
            b'L' => {
                long_name = Some(cstr(data));
                continue;
            }
            b'K' => {
                long_link = Some(cstr(data));
                continue;
            }
            _ => {}
        }
        let mut name = cstr(&h[0..100]);
        let prefix = cstr(&h[345..500]);
        if &h[257..262] == b"ustar" && !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
        let name = pax.remove("path").or(long_name.take()).unwrap_or(name);
        let link = pax
            .remove("linkpath")
            .or(long_link.take())
            .unwrap_or_else(|| cstr(&h[157..257]));
        let uid = match pax.remove("uid") {
            Some(u) => u.parse()?,
            None => octal(&h[108..116])?,
        };
        let gid = match pax.remove("gid") {
            Some(g) => g.parse()?,
            None => octal(&h[116..124])?,
        };
        pax.clear();
        out.push(Entry {
            name: clean(&name),
            kind,
            mode: octal(&h[100..108])? as u32 & 0o7777,
            uid,
            gid,
            link,
            data: if kind == b'0' || kind == 0 {
                data.to_vec()
            } else {
                Vec::new()
            },
        });
    }
    Ok(out)
}

/// A docker-archive image, read whole.
#[derive(Debug)]
pub struct Image {
    /// `RepoTags` of its manifest entry.
    pub repo_tags: Vec<String>,
    /// The image config (`architecture`, `os`, `config`, `rootfs`, `history`).
    pub config: Value,
    /// Each layer's entries, base first.
    pub layers: Vec<Vec<Entry>>,
}

fn sha256_hex(bytes: &[u8]) -> Result<String> {
    // sha256sum, as the machine has it: no hashing crate for one check.
    use std::io::Write as _;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("sha256sum")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output()?;
    writer.join().map_err(|_| anyhow::anyhow!("writer"))??;
    let text = String::from_utf8(out.stdout)?;
    Ok(text
        .split_whitespace()
        .next()
        .context("sha256sum output")?
        .to_string())
}

/// The sha256 of `bytes` as `sha256:<hex>`.
pub fn digest(bytes: &[u8]) -> Result<String> {
    Ok(format!("sha256:{}", sha256_hex(bytes)?))
}

impl Image {
    /// Reads `path`, checking what a runtime checks: one manifest entry, the config it names, and each
    /// layer's digest equal to the config's `rootfs.diff_ids`.
    pub fn read(path: &Path) -> Result<Image> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let outer = tar_entries(&bytes)?;
        let file = |name: &str| -> Result<&Entry> {
            outer
                .iter()
                .find(|e| e.name == name && e.is_file())
                .with_context(|| format!("{}: no {name}", path.display()))
        };
        let manifest: Value = serde_json::from_slice(&file("manifest.json")?.data)?;
        let list = manifest.as_array().context("manifest.json is not a list")?;
        ensure!(list.len() == 1, "manifest.json has {} images", list.len());
        let m = &list[0];
        let config_name = m["Config"].as_str().context("Config")?;
        let config_bytes = &file(config_name)?.data;
        ensure!(
            digest(config_bytes)? == format!("sha256:{}", config_name.trim_end_matches(".json")),
            "the config's name is not its digest"
        );
        let config: Value = serde_json::from_slice(config_bytes)?;
        let diff_ids: Vec<&str> = config["rootfs"]["diff_ids"]
            .as_array()
            .context("rootfs.diff_ids")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let layer_names: Vec<&str> = m["Layers"]
            .as_array()
            .context("Layers")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        ensure!(
            diff_ids.len() == layer_names.len(),
            "{} diff_ids for {} layers",
            diff_ids.len(),
            layer_names.len()
        );
        let mut layers = Vec::new();
        for (name, id) in layer_names.iter().zip(&diff_ids) {
            let data = &file(name)?.data;
            let got = digest(data)?;
            if got != *id {
                bail!("layer {name}: digest {got}, the config says {id}");
            }
            layers.push(tar_entries(data)?);
        }
        let repo_tags = m["RepoTags"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Image {
            repo_tags,
            config,
            layers,
        })
    }

    /// The file system a container sees: later layers over earlier ones (whiteouts are not written by
    /// our writer and are refused).
    pub fn files(&self) -> Result<BTreeMap<&str, &Entry>> {
        let mut out = BTreeMap::new();
        for layer in &self.layers {
            for e in layer {
                ensure!(
                    !e.name.rsplit('/').next().unwrap_or("").starts_with(".wh."),
                    "whiteout {}",
                    e.name
                );
                out.insert(e.name.as_str(), e);
            }
        }
        Ok(out)
    }
}

/// Whether an ELF executable is statically linked: no program interpreter (`PT_INTERP`), and with
/// `allow_pie` false no dynamic section either (`file`'s "statically linked" rather than "static-pie
/// linked").
pub fn elf_is_static(bytes: &[u8], allow_pie: bool) -> Result<bool> {
    ensure!(
        bytes.len() > 64 && &bytes[..4] == b"\x7fELF",
        "not an ELF file"
    );
    ensure!(
        bytes[4] == 2 && bytes[5] == 1,
        "not a 64-bit little-endian ELF"
    );
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u64_at = |o: usize| -> Result<usize> {
        let b: [u8; 8] = bytes.get(o..o + 8).context("ELF truncated")?.try_into()?;
        Ok(u64::from_le_bytes(b) as usize)
    };
    let (phoff, phentsize, phnum) = (u64_at(32)?, u16_at(54), u16_at(56));
    let mut dynamic = false;
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let kind = u32::from_le_bytes(
            bytes
                .get(at..at + 4)
                .context("ELF program header truncated")?
                .try_into()?,
        );
        match kind {
            3 => return Ok(false), // PT_INTERP: a dynamic loader runs it
            2 => dynamic = true,   // PT_DYNAMIC
            _ => {}
        }
    }
    Ok(allow_pie || !dynamic)
}
