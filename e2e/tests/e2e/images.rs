//! The images the tests run are the images a user gets from `docker build`.
//!
//! No container engine exists here, so the check reads the Dockerfiles' instructions itself and compares
//! them with the archives `scripts/images.sh build` writes: the image config (Entrypoint, Cmd, User, Env,
//! WorkingDir, ExposedPorts, Labels) as Docker's rules make it from the base's and the final stage's
//! instructions; every COPY destination, with its mode and owner and the very bytes the build stage's
//! `cargo build` produced (or the text its `printf` writes); the static linking the build stage's `file`
//! check asserts; for a FROM-scratch image, nothing else; for the Debian base, the packages the stage
//! installs. The parsing here shares no code with scripts/images.py. A second test changes a Dockerfile
//! in memory (ENTRYPOINT, USER, LABEL, a COPY destination, ENV) and an archive's config, and requires
//! each change to be caught.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::image_archive::{elf_is_static, Image};
use serde_json::{json, Map, Value};

/// The images built from a Dockerfile: name, Dockerfile, target (None: the last stage).
const IMAGES: &[(&str, &str, Option<&str>)] = &[
    ("injector", "Dockerfile", None),
    ("iptables-init", "Dockerfile.init", None),
    (
        "iptables-init-native-nftables",
        "Dockerfile.init",
        Some("native-nftables"),
    ),
    ("istio-cni", "Dockerfile.cni", None),
    ("testproxy", "Dockerfile.testproxy", None),
];

/// Docker's default PATH, which both local bases carry.
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The config a base image gives: BuildKit's `emptyImage` for scratch, and the official
/// debian:bookworm-slim's.
fn base_config(base: &str) -> Map<String, Value> {
    let v = match base {
        "scratch" => json!({"Env": [DEFAULT_PATH], "WorkingDir": "/"}),
        "debian:bookworm-slim" => json!({"Env": [DEFAULT_PATH], "Cmd": ["bash"]}),
        other => panic!("a Dockerfile's final stage is FROM {other}, which cannot be built here"),
    };
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

#[derive(Debug, Clone)]
struct Stage {
    base: String,
    name: Option<String>,
    /// (KEYWORD, text) with continuation lines joined.
    instructions: Vec<(String, String)>,
}

/// The stages of a Dockerfile (continuations joined as Docker joins them; comment lines dropped, also
/// inside a continuation).
fn stages(text: &str) -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut joined = line.to_string();
        while joined.trim_end().ends_with('\\') {
            let t = joined.trim_end();
            joined = t[..t.len() - 1].to_string();
            match lines.next() {
                Some(next) if next.trim_start().starts_with('#') => joined.push('\\'),
                Some(next) => joined.push_str(next),
                None => break,
            }
        }
        let (keyword, rest) = joined.trim().split_once(' ').unwrap_or((joined.trim(), ""));
        let keyword = keyword.to_ascii_uppercase();
        let rest = rest.trim().to_string();
        if keyword == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let (base, name) = match words.as_slice() {
                [b] => (b.to_string(), None),
                [b, as_, n] if as_.eq_ignore_ascii_case("as") => {
                    (b.to_string(), Some(n.to_string()))
                }
                _ => panic!("FROM {rest}"),
            };
            out.push(Stage {
                base,
                name,
                instructions: Vec::new(),
            });
        } else {
            out.last_mut()
                .expect("an instruction before FROM")
                .instructions
                .push((keyword, rest));
        }
    }
    out
}

/// Splits a shell word list (single and double quotes, backslash escapes outside single quotes), as
/// the case tables' arguments are split.
fn words(text: &str) -> Vec<String> {
    test_support::corpus::shell_words(text).unwrap_or_else(|e| panic!("{e}"))
}

/// `k=v …` (ENV, LABEL) or the legacy `ENV k v`.
fn pairs(text: &str) -> Vec<(String, String)> {
    let w = words(text);
    if !w.is_empty() && !w[0].contains('=') {
        let value = text
            .split_once(char::is_whitespace)
            .map_or("", |x| x.1.trim());
        return vec![(w[0].clone(), value.to_string())];
    }
    w.iter()
        .map(|p| {
            let (k, v) = p.split_once('=').expect("KEY=VALUE");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// ENTRYPOINT/CMD: the exec (JSON) form, else `/bin/sh -c TEXT`.
fn command_form(text: &str) -> Value {
    match serde_json::from_str::<Vec<String>>(text) {
        Ok(list) => json!(list),
        Err(_) => json!(["/bin/sh", "-c", text]),
    }
}

/// What the build stage leaves at a path the final stage copies.
#[derive(Debug, Clone, PartialEq)]
enum Made {
    /// `cp <repo path> <dst>`: a cargo build's output.
    Cargo(PathBuf),
    /// `printf '%s\n' L1 L2 … > <dst>`.
    Text(String),
}

#[derive(Debug, Clone, PartialEq)]
struct ExpectedFile {
    made: Made,
    mode: u32,
    /// `Some(allow_pie)` when the build stage asserts `file … | grep … 'statically linked'`.
    static_check: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
struct Expected {
    base: String,
    /// apt packages the final stage installs.
    packages: Vec<String>,
    config: Map<String, Value>,
    files: BTreeMap<String, ExpectedFile>,
}

/// The `&&`-separated commands of a build stage's RUN lines.
fn run_commands(stage: &Stage) -> Vec<Vec<String>> {
    stage
        .instructions
        .iter()
        .filter(|(k, _)| k == "RUN")
        .flat_map(|(_, t)| t.split("&&").map(words).collect::<Vec<_>>())
        .collect()
}

/// The cargo output directory (`target/` or `$CARGO_TARGET_DIR`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
}

/// What `stage` leaves at `path`, from its RUN commands.
fn made_by(stage: &Stage, path: &str) -> (Made, u32, Option<bool>) {
    let cmds = run_commands(stage);
    let mut made = None;
    let mut mode = None;
    let mut static_check = None;
    for (i, c) in cmds.iter().enumerate() {
        match c.as_slice() {
            [cp, from, to] if cp == "cp" && to == path => {
                let rel = from.strip_prefix("target/").expect("cp from target/");
                // The cargo command that made it must build exactly that file: `--target T`, `--release`,
                // `--bin B` give target/T/release/B.
                let cargo = cmds
                    .iter()
                    .find(|c| c.iter().any(|w| w == "cargo") && c.iter().any(|w| w == "build"))
                    .expect("a cargo build before the cp");
                let arg = |flag: &str| {
                    cargo
                        .iter()
                        .position(|w| w == flag)
                        .and_then(|p| cargo.get(p + 1))
                        .cloned()
                };
                let triple = arg("--target").expect("cargo build --target");
                let bin = arg("--bin").expect("cargo build --bin");
                assert!(cargo.iter().any(|w| w == "--release"), "{cargo:?}");
                assert_eq!(
                    rel,
                    format!("{triple}/release/{bin}"),
                    "cp {from} is not what {cargo:?} builds"
                );
                made = Some(Made::Cargo(target_dir().join(rel)));
                // cp makes the file with the build output's mode: cargo's 0755.
                mode.get_or_insert(0o755);
            }
            [printf, fmt, rest @ ..] if printf == "printf" && rest.len() >= 2 => {
                let (redir, target) = (&rest[rest.len() - 2], &rest[rest.len() - 1]);
                if redir == ">" && target == path {
                    assert_eq!(fmt, "%s\\n", "printf format");
                    let lines = &rest[..rest.len() - 2];
                    made = Some(Made::Text(lines.iter().map(|l| format!("{l}\n")).collect()));
                    mode.get_or_insert(0o644);
                }
            }
            [chmod, m, files @ ..] if chmod == "chmod" && files.iter().any(|f| f == path) => {
                mode = Some(u32::from_str_radix(m, 8).expect("chmod mode"));
            }
            _ => {}
        }
        // `file P | grep -q 'statically linked'` (or -Eq 'statically linked|static-pie linked').
        if c.first().map(String::as_str) == Some("file")
            && c.get(1).map(String::as_str) == Some(path)
        {
            let pattern = c.last().expect("grep pattern");
            assert!(c.iter().any(|w| w == "grep"), "{c:?} ({i})");
            static_check = Some(pattern.contains("static-pie"));
            assert!(pattern.contains("statically linked"), "{pattern}");
        }
    }
    let made = made
        .unwrap_or_else(|| panic!("the build stage makes {path} in a way this test cannot tell"));
    (made, mode.expect("a mode"), static_check)
}

/// The image `docker build -f DOCKERFILE [--target T]` gives, from the Dockerfile's text.
fn expected(text: &str, target: Option<&str>) -> Expected {
    let all = stages(text);
    let stage = match target {
        None => all.last().expect("a stage").clone(),
        Some(t) => all
            .iter()
            .find(|s| s.name.as_deref() == Some(t))
            .unwrap_or_else(|| panic!("no stage {t}"))
            .clone(),
    };
    let mut config = base_config(&stage.base);
    let mut cmd_set = false;
    let mut files = BTreeMap::new();
    let mut packages = Vec::new();
    for (keyword, text) in &stage.instructions {
        match keyword.as_str() {
            "RUN" => {
                for c in text.split("&&").map(words) {
                    if let Some(i) = c.iter().position(|w| w == "install") {
                        if c.iter().any(|w| w == "apt-get") {
                            packages
                                .extend(c[i + 1..].iter().filter(|w| !w.starts_with('-')).cloned());
                        }
                    }
                }
            }
            "COPY" => {
                let w = words(text);
                let from = w
                    .iter()
                    .find_map(|x| x.strip_prefix("--from="))
                    .expect("COPY --from");
                let paths: Vec<&String> = w.iter().filter(|x| !x.starts_with("--")).collect();
                let [src, dst] = paths.as_slice() else {
                    panic!("COPY {text}: one source and a destination")
                };
                let build = all
                    .iter()
                    .find(|s| s.name.as_deref() == Some(from))
                    .expect("the COPY --from stage");
                let (made, mode, static_check) = made_by(build, src);
                let dst = dst.trim_start_matches('/').to_string();
                files.insert(
                    dst,
                    ExpectedFile {
                        made,
                        mode,
                        static_check,
                    },
                );
            }
            "ENV" => {
                let env = config.entry("Env").or_insert_with(|| json!([]));
                let list = env.as_array_mut().expect("Env list");
                for (k, v) in pairs(text) {
                    let entry = json!(format!("{k}={v}"));
                    match list.iter().position(|e| {
                        e.as_str().and_then(|e| e.split_once('=')).map(|x| x.0) == Some(&k)
                    }) {
                        Some(i) => list[i] = entry,
                        None => list.push(entry),
                    }
                }
            }
            "ENTRYPOINT" => {
                config.insert("Entrypoint".into(), command_form(text));
                if !cmd_set {
                    // Docker: an ENTRYPOINT resets the CMD inherited from the base.
                    config.remove("Cmd");
                }
            }
            "CMD" => {
                config.insert("Cmd".into(), command_form(text));
                cmd_set = true;
            }
            "USER" => {
                config.insert("User".into(), json!(text));
            }
            "WORKDIR" => {
                config.insert("WorkingDir".into(), json!(text));
            }
            "EXPOSE" => {
                let ports = config.entry("ExposedPorts").or_insert_with(|| json!({}));
                for p in text.split_whitespace() {
                    let key = if p.contains('/') {
                        p.to_string()
                    } else {
                        format!("{p}/tcp")
                    };
                    ports[key] = json!({});
                }
            }
            "LABEL" => {
                let labels = config.entry("Labels").or_insert_with(|| json!({}));
                for (k, v) in pairs(text) {
                    labels[k] = json!(v);
                }
            }
            other => panic!("{other} in a final stage: teach this test what Docker does with it"),
        }
    }
    Expected {
        base: stage.base,
        packages,
        config,
        files,
    }
}

/// Every way `image` differs from `want` (empty: the same image).
fn differences(name: &str, want: &Expected, image: &Image, reference: &str) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut differ = |what: String| diffs.push(format!("{name}: {what}"));
    if image.repo_tags != [reference] {
        differ(format!(
            "RepoTags {:?}, want [{reference}]",
            image.repo_tags
        ));
    }
    for (k, v) in [("architecture", "amd64"), ("os", "linux")] {
        if image.config[k] != v {
            differ(format!("{k} {}, want {v}", image.config[k]));
        }
    }
    let got = image.config["config"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let keys: BTreeSet<&String> = got.keys().chain(want.config.keys()).collect();
    for k in keys {
        if got.get(k) != want.config.get(k) {
            differ(format!(
                "config {k}: the image has {}, the Dockerfile gives {}",
                got.get(k).map_or("nothing".into(), Value::to_string),
                want.config
                    .get(k)
                    .map_or("nothing".into(), Value::to_string)
            ));
        }
    }
    let files = match image.files() {
        Ok(f) => f,
        Err(e) => {
            differ(format!("layers: {e}"));
            return diffs;
        }
    };
    for (path, f) in &want.files {
        let Some(e) = files.get(path.as_str()) else {
            differ(format!("/{path} is missing"));
            continue;
        };
        if !e.is_file() || e.mode != f.mode || (e.uid, e.gid) != (0, 0) {
            differ(format!(
                "/{path}: type {} mode {:o} owner {}:{}, want a file of mode {:o} owned by 0:0",
                e.kind as char, e.mode, e.uid, e.gid, f.mode
            ));
        }
        let want_bytes = match &f.made {
            Made::Cargo(p) => {
                std::fs::read(p).unwrap_or_else(|e| panic!("the cargo output {}: {e}", p.display()))
            }
            Made::Text(t) => t.as_bytes().to_vec(),
        };
        if e.data != want_bytes {
            differ(format!("/{path} is not the build stage's {:?}", f.made));
        }
        if let Some(allow_pie) = f.static_check {
            if !elf_is_static(&e.data, allow_pie).unwrap_or(false) {
                differ(format!("/{path} is not statically linked"));
            }
        }
    }
    if want.base == "scratch" {
        // Nothing but the copied files and their parent folders.
        let parents: BTreeSet<String> = want
            .files
            .keys()
            .flat_map(|p| {
                let parts: Vec<&str> = p.split('/').collect();
                (1..parts.len())
                    .map(move |i| parts[..i].join("/"))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (path, e) in &files {
            let expected =
                want.files.contains_key(*path) || (parents.contains(*path) && e.kind == b'5');
            if !expected {
                differ(format!("/{path} is in the image but no COPY puts it there"));
            }
        }
    } else {
        let status = files
            .get("var/lib/dpkg/status")
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
            .unwrap_or_default();
        for p in &want.packages {
            if !status.contains(&format!("Package: {p}\nStatus: install ok installed")) {
                differ(format!("package {p} is not installed"));
            }
        }
        if !files
            .get("etc/debian_version")
            .is_some_and(|e| e.data.starts_with(b"12."))
        {
            differ("/etc/debian_version is not bookworm's".into());
        }
        // `rm -rf /var/lib/apt/lists/*`, and no downloaded packages.
        for path in files.keys() {
            if (path.starts_with("var/lib/apt/lists/") && *path != "var/lib/apt/lists/partial")
                || path.ends_with(".deb")
            {
                differ(format!("/{path} should not be in the image"));
            }
        }
    }
    diffs
}

/// `scripts/images.sh build` for the Dockerfile images (cached: cargo's no-op builds and unchanged
/// archives), and its NAME=VALUE lines; run once for all the tests here.
fn build_images() -> BTreeMap<String, String> {
    static BUILT: std::sync::OnceLock<BTreeMap<String, String>> = std::sync::OnceLock::new();
    BUILT.get_or_init(run_build).clone()
}

fn run_build() -> BTreeMap<String, String> {
    let names: Vec<&str> = IMAGES.iter().map(|i| i.0).collect();
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/images.sh"))
        .arg("build")
        .args(&names)
        .current_dir(repo());
    // What `cargo test` sets for a test process (CARGO_PKG_*, CARGO_MANIFEST_*, LD_LIBRARY_PATH, …) must not
    // reach the nested cargo builds: with them cargo took its release builds for stale and rebuilt them.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let keep = ["CARGO_HOME", "CARGO_TARGET_DIR"].contains(&k.as_ref());
        if (k.starts_with("CARGO_") && !keep)
            || k == "CARGO"
            || k == "LD_LIBRARY_PATH"
            || k == "OUT_DIR"
        {
            cmd.env_remove(k.as_ref());
        }
    }
    let out = cmd.output().expect("run scripts/images.sh");
    assert!(
        out.status.success(),
        "scripts/images.sh build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn dockerfile(name: &str) -> String {
    std::fs::read_to_string(repo().join(name)).expect("read the Dockerfile")
}

#[test]
fn each_image_is_what_its_dockerfile_gives() {
    test_support::require_root();
    let built = build_images();
    let mut all = Vec::new();
    for (name, file, target) in IMAGES {
        let reference = &built[*name];
        assert_eq!(
            reference,
            &format!("{}/{name}:{}", built["HUB"], built["TAG"]),
            "the reference is not composed from hub and tag as the charts compose it"
        );
        let image =
            Image::read(Path::new(&built[&format!("{name}_ARCHIVE")])).expect("read the archive");
        let want = expected(&dockerfile(file), *target);
        assert!(!want.files.is_empty(), "{file}: no COPY found");
        all.extend(differences(name, &want, &image, reference));
    }
    assert!(
        all.is_empty(),
        "the images differ from their Dockerfiles:\n{}",
        all.join("\n")
    );
}

#[test]
fn a_difference_between_a_dockerfile_and_its_image_is_caught() {
    test_support::require_root();
    let built = build_images();
    let init = Image::read(Path::new(&built["iptables-init_ARCHIVE"])).expect("archive");
    let text = dockerfile("Dockerfile.init");
    let reference = &built["iptables-init"];
    assert_eq!(
        differences("iptables-init", &expected(&text, None), &init, reference),
        Vec::<String>::new()
    );

    // Each edit of the Dockerfile, and what the report must name.
    let edits: &[(&str, &str, &str)] = &[
        (
            r#"ENTRYPOINT ["/usr/local/bin/iptables-init"]"#,
            r#"ENTRYPOINT ["/usr/local/bin/iptables-init", "istio-iptables"]"#,
            "config Entrypoint",
        ),
        (
            r#"ENTRYPOINT ["/usr/local/bin/iptables-init"]"#,
            "ENTRYPOINT [\"/usr/local/bin/iptables-init\"]\nUSER 1337",
            "config User",
        ),
        (
            r#"ENTRYPOINT ["/usr/local/bin/iptables-init"]"#,
            "ENTRYPOINT /usr/local/bin/iptables-init",
            "config Entrypoint",
        ),
        (
            r#"ENTRYPOINT ["/usr/local/bin/iptables-init"]"#,
            "ENTRYPOINT [\"/usr/local/bin/iptables-init\"]\nCMD [\"--help\"]",
            "config Cmd",
        ),
        (
            "COPY --from=build /iptables-init /usr/local/bin/iptables-init",
            "COPY --from=build /iptables-init /usr/bin/iptables-init",
            "/usr/bin/iptables-init is missing",
        ),
        (
            "org.opencontainers.image.title=\"iptables-init\" \\\n      org.opencontainers.image.description=\"sidecar-inject's init container (replaces",
            "org.opencontainers.image.title=\"init\" \\\n      org.opencontainers.image.description=\"sidecar-inject's init container (replaces",
            "config Labels",
        ),
        (
            r#"ENTRYPOINT ["/usr/local/bin/iptables-init"]"#,
            "ENV ENVOY_USER=istio-proxy\nENTRYPOINT [\"/usr/local/bin/iptables-init\"]",
            "config Env",
        ),
        (
            "iptables iproute2 \\",
            "iptables iproute2 nftables \\",
            "package nftables is not installed",
        ),
    ];
    for (from, to, named) in edits {
        assert!(
            text.contains(from),
            "Dockerfile.init no longer holds {from:?}: update this test"
        );
        let edited = text.replacen(from, to, 1);
        let diffs = differences("iptables-init", &expected(&edited, None), &init, reference);
        assert!(
            diffs.iter().any(|d| d.contains(named)),
            "changing {from:?} to {to:?} was not caught as {named:?}: {diffs:?}"
        );
    }

    // The other direction: an archive whose config or file differs from the Dockerfile's.
    let native =
        Image::read(Path::new(&built["iptables-init-native-nftables_ARCHIVE"])).expect("archive");
    let want = expected(&text, Some("native-nftables"));
    let reference = &built["iptables-init-native-nftables"];
    assert_eq!(
        differences("native", &want, &native, reference),
        Vec::<String>::new()
    );
    let mut changed = Image {
        repo_tags: native.repo_tags.clone(),
        config: native.config.clone(),
        layers: native.layers.clone(),
    };
    changed.config["config"]["Entrypoint"] = json!(["/bin/sh"]);
    let diffs = differences("native", &want, &changed, reference);
    assert!(
        diffs.iter().any(|d| d.contains("config Entrypoint")),
        "{diffs:?}"
    );
    let mut changed = Image {
        repo_tags: native.repo_tags.clone(),
        config: native.config.clone(),
        layers: native.layers.clone(),
    };
    let last = changed.layers.last_mut().expect("a layer");
    let binary = last
        .iter_mut()
        .find(|e| e.name == "iptables-init")
        .expect("the binary");
    binary.data[100] ^= 1;
    binary.mode = 0o700;
    let diffs = differences("native", &want, &changed, reference);
    assert!(
        diffs.iter().any(|d| d.contains("is not the build stage's")),
        "{diffs:?}"
    );
    assert!(diffs.iter().any(|d| d.contains("mode 700")), "{diffs:?}");
}

#[test]
fn the_init_images_stay_small_and_their_binary_static() {
    test_support::require_root();
    let built = build_images();
    // The scratch image is the static binary (at most 3 MiB, scripts/check-static-init.sh) and a few
    // headers; the Debian one is bookworm-slim (about 75 MB) with iptables and iproute2.
    for (name, limit) in [
        ("iptables-init-native-nftables", 3 * 1024 * 1024 + 64 * 1024),
        ("iptables-init", 100 * 1024 * 1024),
    ] {
        let archive = &built[&format!("{name}_ARCHIVE")];
        let size = std::fs::metadata(archive).expect("archive").len();
        assert!(size <= limit, "{name}: {size} bytes, more than {limit}");
        let image = Image::read(Path::new(archive)).expect("archive");
        let files = image.files().expect("files");
        let path = match name {
            "iptables-init" => "usr/local/bin/iptables-init",
            _ => "iptables-init",
        };
        let bin = files.get(path).expect("the binary");
        assert!(
            elf_is_static(&bin.data, false).expect("ELF"),
            "{name}: not static"
        );
    }
}
