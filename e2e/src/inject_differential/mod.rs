//! The injection and template differentials: generated workloads,
//! configurations and user templates run through Istio's own kube-inject code and through
//! `injector kube-inject` with the same three files, the results compared.
//!
//! - [`generate`] draws the cases from a seed.
//! - [`release`] picks the texts (a release tag's, or a pinned module's own chart) and the peer that runs
//!   them.
//! - Istio's side is `inject-batch` (`tools/istio/cmd/inject-batch`), which calls the library path of
//!   `istioctl kube-inject` (`inject.IntoResourceFile`) for many cases in one process; every
//!   `istioctl_every`-th case also runs through the real `istioctl kube-inject --revision default` and its
//!   output must equal the driver's byte for byte, which shows the driver agrees with istioctl.
//! - Both accepted: the output streams are compared semantically (`test_support::semantic`, the rule of
//!   `testdata/istio/inject/README.md`). Otherwise: whether both refused.
//!
//! A difference is allowed only when [`allow`] classifies it into a class listed, with its reason and
//! Istio's function, in `e2e/inject-differential-allow.tsv`.

pub mod allow;
pub mod generate;
pub mod release;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Map, Value};

use generate::{Case, Kind};
use release::Release;

/// The programs under comparison.
#[derive(Debug, Clone)]
pub struct Programs {
    /// Istio's kube-inject library path, many cases per process.
    pub batch: PathBuf,
    /// Istio's `istioctl`, for the sampled cases.
    pub istioctl: PathBuf,
    /// `injector` (run as `injector kube-inject ...`).
    pub ours: PathBuf,
    /// The texts both sides run (the peers above are this release's).
    pub release: Release,
    /// `injector --evaluate-texts`: the texts through the evaluator even where the compiled templates
    /// render them (1.31.0-rc.0's), so both of our paths meet Istio.
    pub evaluate_texts: bool,
}

impl Programs {
    /// The built peers of `tools/istio` with its own chart texts, and the built `injector`; panics when one
    /// is missing.
    pub fn built() -> Programs {
        Programs::for_release(release::PINNED)
    }

    /// The built peers of `release` and the built `injector`; panics when one is missing.
    pub fn for_release(release: Release) -> Programs {
        Programs {
            batch: crate::peers::peer(&release.peer.program("inject-batch")),
            istioctl: crate::peers::peer(&release.peer.program("istioctl")),
            ours: crate::bin("injector"),
            release,
            evaluate_texts: false,
        }
    }

    /// Which peer binaries run which texts, for a run's summary line.
    pub fn describe(&self) -> String {
        let ours = if self.evaluate_texts {
            "; ours with --evaluate-texts"
        } else {
            ""
        };
        format!(
            "{}{ours}",
            self.release.describe(&self.batch, &self.istioctl)
        )
    }
}

/// How one program's run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub ok: bool,
    pub output: String,
    pub error: String,
}

/// The counts of a run; its differences are printed reports.
pub type Tally = crate::differential::Tally<Sampled, String>;

/// What only the injection differential counts.
#[derive(Debug, Default, Clone)]
pub struct Sampled {
    /// Cases also run through the real istioctl (its output equal to the driver's).
    pub istioctl: u64,
}

impl crate::differential::Counts for Sampled {
    fn add(&mut self, other: Sampled) {
        self.istioctl += other.istioctl;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cases: {} same ({} both refused), {} through istioctl too, allowed {:?}, {} unexplained",
            self.cases,
            self.same,
            self.both_refused,
            self.own.istioctl,
            self.allowed,
            self.differences.len()
        )
    }
}

/// The chart's pod templates, as `inject-batch chart-templates` prints them from Istio's module.
pub fn chart_templates(batch: &Path) -> Result<Map<String, Value>> {
    let out = Command::new(batch)
        .arg("chart-templates")
        .output()
        .with_context(|| format!("running {}", batch.display()))?;
    if !out.status.success() {
        bail!(
            "inject-batch chart-templates: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    match serde_json::from_slice(&out.stdout)? {
        Value::Object(m) => Ok(m),
        other => bail!("inject-batch chart-templates printed {other}"),
    }
}

/// One `inject-batch` process, restarted when a case kills it.
struct Batch {
    path: PathBuf,
    proc: Option<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl Batch {
    fn run(&mut self, id: u64, case: &Case, files: &Texts) -> Result<Outcome> {
        if self.proc.is_none() {
            let mut child = Command::new(&self.path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", self.path.display()))?;
            let stdin = child.stdin.take().context("stdin")?;
            let stdout = BufReader::new(child.stdout.take().context("stdout")?);
            self.proc = Some((child, stdin, stdout));
        }
        let Some((child, stdin, stdout)) = self.proc.as_mut() else {
            bail!("no inject-batch process");
        };
        let req = json!({"id": id, "input": case.input, "values": files.values,
            "mesh": files.mesh, "config": files.config, "native": case.native});
        let mut line = String::new();
        let sent = writeln!(stdin, "{req}").and_then(|()| stdin.flush());
        let read = sent.and_then(|()| stdout.read_line(&mut line));
        if !matches!(read, Ok(n) if n > 0) {
            // Istio's process died on this case (a Go runtime fatal error, e.g. out of memory).
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            self.proc = None;
            return Ok(Outcome {
                ok: false,
                output: String::new(),
                error: format!("crash: inject-batch died ({status})"),
            });
        }
        let r: Value = serde_json::from_str(&line).context("inject-batch response")?;
        Ok(Outcome {
            ok: r["ok"] == json!(true),
            output: r["output"].as_str().unwrap_or_default().to_string(),
            error: r["error"].as_str().unwrap_or_default().to_string(),
        })
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some((mut child, stdin, _)) = self.proc.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// The three documents of a case as the texts written to its files.
struct Texts {
    values: String,
    mesh: String,
    config: String,
}

/// The case's files over the run's texts (`charts`) and base values (`base_values`; `None`: the test
/// environment's `base-values.json`).
fn texts(case: &Case, charts: &Map<String, Value>, base_values: Option<&Value>) -> Result<Texts> {
    use test_support::corpus::{merge, Config};
    let mut templates = charts.clone();
    templates.extend(case.templates.clone());
    let mut config = Config::base()?;
    if let Some(values) = base_values {
        config.values = values.clone();
    }
    merge(&mut config.values, &case.values);
    merge(&mut config.mesh, &case.mesh);
    merge(
        &mut config.injector_config,
        &json!({ "templates": templates }),
    );
    Ok(Texts {
        values: serde_json::to_string_pretty(&config.values)?,
        mesh: serde_json::to_string_pretty(&config.mesh)?,
        config: serde_json::to_string_pretty(&config.injector_config)?,
    })
}

fn write_files(dir: &Path, case: &Case, t: &Texts) -> Result<[PathBuf; 4]> {
    let paths = ["input.yaml", "values.json", "mesh.yaml", "config.yaml"].map(|n| dir.join(n));
    for (p, text) in paths
        .iter()
        .zip([&case.input, &t.values, &t.mesh, &t.config])
    {
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(paths)
}

fn run_command(cmd: &mut Command) -> Result<Outcome> {
    let out = cmd.output().context("running a kube-inject")?;
    Ok(Outcome {
        ok: out.status.success(),
        output: String::from_utf8_lossy(&out.stdout).into_owned(),
        error: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The two command lines that reproduce a case from its files in `dir`.
pub fn reproducer(programs: &Programs, dir: &Path, native: bool) -> [String; 2] {
    let d = dir.display();
    [
        format!(
            "ENABLE_NATIVE_SIDECARS={native} {} kube-inject --revision default -f {d}/input.yaml \
             --injectConfigFile {d}/config.yaml --meshConfigFile {d}/mesh.yaml --valuesFile {d}/values.json",
            programs.istioctl.display()
        ),
        format!(
            "{} kube-inject -f {d}/input.yaml --injector-config {d}/config.yaml --mesh-config {d}/mesh.yaml \
             --values {d}/values.json --native-sidecars {native}",
            programs.ours.display()
        ),
    ]
}

/// The probe fields that are non-pointer `int32` with `omitempty` in k8s.io/api `core/v1` `Probe`.
const PROBE_INTS: [&str; 5] = [
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
];

/// Removes from `injector`'s output the zero values Go's typed round trip drops: Istio's kube-inject
/// decodes every object into its k8s.io/api type and writes it with `yaml.Marshal`
/// (`inject.IntoResourceFile`), so a probe's `initialDelaySeconds: 0` (plain `int32`, `omitempty`) and a
/// `configMap` volume's `name: ""` (`LocalObjectReference`, `omitempty`) and an env entry's `value: ""`
/// (`EnvVar`, `omitempty`) are not written. The API server
/// reads absent and zero alike for these fields, so the objects are the same. Only these fields: most
/// zero values (`runAsUser: 0`, a pointer) are kept by Go and compared.
fn drop_omitted_zeros(v: &mut Value, key: &str) {
    match v {
        Value::Object(m) => {
            if key.ends_with("Probe") {
                m.retain(|k, v| !(PROBE_INTS.contains(&k.as_str()) && v == &json!(0)));
            }
            if key == "configMap" {
                m.retain(|k, v| !(k == "name" && v == &json!("")));
            }
            if key == "env" {
                m.retain(|k, v| !(k == "value" && v == &json!("")));
            }
            for (k, v) in m.iter_mut() {
                drop_omitted_zeros(v, k);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|e| drop_omitted_zeros(e, key)),
        _ => {}
    }
}

/// Compares two outcomes: `None` when equal (or both refused), else what differs. Both sides ran the same
/// texts (a release tag's, or the pinned module's own chart), so the outputs are compared whole: no
/// entry or image is set aside as a version skew.
fn compare(istio: &Outcome, ours: &Outcome) -> Option<String> {
    match (istio.ok, ours.ok) {
        (false, false) => None,
        (true, true) => {
            let a = test_support::pods::documents(&istio.output);
            let b = test_support::pods::documents(&ours.output);
            match (a, b) {
                (Ok(a), Ok(mut b)) => {
                    b.iter_mut().for_each(|d| drop_omitted_zeros(d, ""));
                    test_support::semantic::compare_documents(&b, &a)
                }
                .err()
                .map(|e| format!("outputs differ (got = ours, want = Istio): {e}")),
                (a, b) => Some(format!(
                    "unparsable output: Istio {:?}, ours {:?}",
                    a.err(),
                    b.err()
                )),
            }
        }
        (true, false) => Some("Istio accepts, ours refuses".into()),
        (false, true) => Some("Istio refuses, ours accepts".into()),
    }
}

/// Runs cases `range` of `kind` and `seed`; every `istioctl_every`-th also through the real istioctl
/// (0: none). Stops early at `deadline`. Failed cases' files are kept under `keep` for their reproducers.
pub fn run_cases(
    programs: &Programs,
    kind: Kind,
    seed: u64,
    range: std::ops::Range<u64>,
    istioctl_every: u64,
    deadline: Option<Instant>,
    keep: &Path,
) -> Result<Tally> {
    let charts = programs.release.templates(&programs.batch)?;
    let base_values = programs.release.values()?;
    let mut batch = Batch {
        path: programs.batch.clone(),
        proc: None,
    };
    let work = test_support::TempDir::new("injdiff");
    let mut tally = Tally::default();
    for index in range {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let mut case = generate::case(kind, seed, index);
        programs.release.vary(&mut case);
        let t = texts(&case, &charts, base_values.as_ref())?;
        let [input, values, mesh, config] = write_files(work.path(), &case, &t)?;
        let istio = batch.run(index, &case, &t)?;
        let ours = run_command(
            Command::new(&programs.ours)
                .arg("kube-inject")
                .arg("-f")
                .arg(&input)
                .arg("--injector-config")
                .arg(&config)
                .arg("--mesh-config")
                .arg(&mesh)
                .arg("--values")
                .arg(&values)
                .args([
                    "--native-sidecars",
                    if case.native { "true" } else { "false" },
                ])
                .args(programs.evaluate_texts.then_some("--evaluate-texts"))
                .env_remove("ENABLE_NATIVE_SIDECARS")
                .env_remove("INJECTOR_EVALUATE_TEXTS"),
        )?;
        tally.cases += 1;
        let mut what = Vec::new();
        if istioctl_every > 0 && index % istioctl_every == 0 {
            let real = run_command(
                Command::new(&programs.istioctl)
                    .args(["kube-inject", "--revision", "default", "-f"])
                    .arg(&input)
                    .arg("--injectConfigFile")
                    .arg(&config)
                    .arg("--meshConfigFile")
                    .arg(&mesh)
                    .arg("--valuesFile")
                    .arg(&values)
                    .env(
                        "ENABLE_NATIVE_SIDECARS",
                        if case.native { "true" } else { "false" },
                    ),
            )?;
            tally.own.istioctl += 1;
            if real.ok != istio.ok || (real.ok && real.output != istio.output) {
                what.push(format!(
                    "inject-batch disagrees with istioctl: istioctl {} / driver {}",
                    if real.ok { "accepts" } else { "refuses" },
                    if istio.ok { "accepts" } else { "refuses" }
                ));
            }
        }
        match compare(&istio, &ours) {
            None if what.is_empty() => {
                tally.same += 1;
                if !istio.ok {
                    tally.both_refused += 1;
                }
                continue;
            }
            None => {}
            Some(d) => match allow::classify(&case, &istio, &ours) {
                Some(class) if what.is_empty() => {
                    *tally.allowed.entry(format!("{class:?}")).or_default() += 1;
                    continue;
                }
                _ => what.push(d),
            },
        }
        let release = programs.release.name;
        let dir = keep.join(format!("{}-{release}-{seed}-{index}", kind_name(kind)));
        std::fs::create_dir_all(&dir)?;
        write_files(&dir, &case, &t)?;
        let [r_istio, r_ours] = reproducer(programs, &dir, case.native);
        tally.differences.push(format!(
            "difference ({} release {release} seed {seed} case {index}): {}\n  reproduce (Istio): {r_istio}\n  reproduce (ours):  {r_ours}\n  Istio: {}\n  ours:  {}",
            kind_name(kind),
            what.join("; "),
            summary(&istio),
            summary(&ours)
        ));
    }
    Ok(tally)
}

fn summary(o: &Outcome) -> String {
    if o.ok {
        "accepted".into()
    } else {
        // The error lines, not the configuration warnings printed before them.
        let lines: Vec<&str> = o
            .error
            .lines()
            .filter(|l| !l.starts_with("warning:"))
            .collect();
        let e: String = lines.join(" | ").trim().chars().take(400).collect();
        format!("refused: {e}")
    }
}

/// The name of a kind, as `--kind` takes it.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Inject => "inject",
        Kind::Template => "template",
    }
}
