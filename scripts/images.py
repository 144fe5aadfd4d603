#!/usr/bin/env python3
"""The project's container images, built from its own Dockerfiles with no container engine, no daemon and
no registry. `scripts/images.sh` runs this; see its header for the commands.

How a Dockerfile becomes an image here:
- The stages a final stage copies from (`COPY --from=build`) are not pulled (`rust:1-bookworm`): their
  instructions run on this host, in the repository (their `WORKDIR /src` + `COPY . .`), exactly as
  written, except that the absolute paths the final stage copies (`/injector`) are mapped into a staging
  folder. `apt-get install` lines there are checked instead of run: the host must have those packages
  (scripts/test.sh installs them).
- The final stage's base is made locally: `scratch` is nothing; `debian:bookworm-slim` is a Debian root
  file system from debootstrap (minbase, slimmed as the official image is), with the packages the stage's
  `apt-get install` names, cached under ~/.cache/sidecar-inject/rootfs by a hash of that recipe.
- Its COPY, ENV, ENTRYPOINT, CMD, USER, WORKDIR, EXPOSE and LABEL instructions are applied with
  Docker's (BuildKit's) rules to the base's config, and scripts/image-archive.py writes the archive.
Any other instruction, base or form fails the build with the line it cannot handle.
"""

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITER = os.path.join(ROOT, "scripts", "image-archive.py")
HUB = os.environ.get("IMAGES_HUB", "localhost/sidecar-inject")
TAG = os.environ.get("IMAGES_TAG", "dev")
OUT = os.environ.get("IMAGES_OUT", os.path.join(ROOT, "target", "images"))
CACHE = os.environ.get(
    "IMAGES_CACHE",
    os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "sidecar-inject", "rootfs"),
)
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN_MIRROR = os.environ.get("IMAGES_DEBIAN_MIRROR", "http://deb.debian.org/debian")

# The images a user builds with `docker build`: name, Dockerfile, target (None: the last stage).
DOCKERFILE_IMAGES = [
    ("injector", "Dockerfile", None),
    ("iptables-init", "Dockerfile.init", None),
    ("iptables-init-native-nftables", "Dockerfile.init", "native-nftables"),
    ("istio-cni", "Dockerfile.cni", None),
    ("testproxy", "Dockerfile.testproxy", None),
]
# Images only the tests use, with no Dockerfile: the kubelet's sandbox image and Istio's own pilot-agent
# (the init container of the start-up benchmark's Istio arm).
EXTRA_IMAGES = ["pause", "istio-pilot-agent"]
ALL = [n for n, _, _ in DOCKERFILE_IMAGES] + EXTRA_IMAGES

# The config each local base starts with, as the real base's (BuildKit's `emptyImage` for scratch; the
# official debian:bookworm-slim image's config).
BASES = {
    "scratch": {"Env": [DEFAULT_PATH], "WorkingDir": "/"},
    "debian:bookworm-slim": {"Env": [DEFAULT_PATH], "Cmd": ["bash"]},
}
# What the official slim image leaves out (debuerreotype's slimify list), plus what debootstrap leaves
# behind that no image holds: the .debs, apt's lists, logs, the host's resolv.conf and hostname.
SLIM_REMOVE = [
    "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/linda",
    "var/cache/apt/archives", "var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin",
    "var/lib/apt/lists", "var/log", "etc/hostname", "etc/resolv.conf", "tmp", "run", "dev", "proc", "sys",
]
SLIM_RECREATE = {  # emptied folders the image keeps, with their modes
    "var/cache/apt/archives/partial": 0o700, "var/lib/apt/lists/partial": 0o700, "var/log": 0o755,
    "tmp": 0o1777, "run": 0o755, "dev": 0o755, "proc": 0o555, "sys": 0o555,
}
SLIM_VERSION = 1  # bump when the slimming changes: it is part of the rootfs cache key


class Fail(Exception):
    pass


def log(msg):
    print(f"images: {msg}", file=sys.stderr, flush=True)


def ref(name):
    return f"{HUB}/{name}:{TAG}"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_tree(path):
    """Content hash of a file, symlink or directory tree (names, modes, bytes)."""
    h = hashlib.sha256()
    if os.path.islink(path):
        h.update(b"L" + os.readlink(path).encode())
    elif os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            h.update(b"D" + name.encode() + sha256_tree(os.path.join(path, name)).encode())
    else:
        h.update(b"F%o" % (os.stat(path).st_mode & 0o7777) + sha256_file(path).encode())
    return h.hexdigest()


# ---- Dockerfile parsing -------------------------------------------------------------------------------

def parse_dockerfile(path):
    """Stages of a Dockerfile: [{"base", "name", "instructions": [(KEYWORD, text, lineno)]}]."""
    stages = []
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        line, start = lines[i], i + 1
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        text = line
        # Continuation lines (trailing backslash); comment lines inside are dropped, as Docker does.
        while text.rstrip().endswith("\\") and i < len(lines):
            text = text.rstrip()[:-1]
            nxt = lines[i]
            i += 1
            if nxt.lstrip().startswith("#"):
                text += "\\"
                continue
            text += nxt  # Docker removes the escape and the newline, nothing else
        keyword, _, rest = text.strip().partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            words = rest.split()
            if words and words[0].startswith("--"):
                raise Fail(f"{path}:{start}: FROM flags are not handled: {rest}")
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append({"base": words[0], "name": words[2], "instructions": []})
            elif len(words) == 1:
                stages.append({"base": words[0], "name": None, "instructions": []})
            else:
                raise Fail(f"{path}:{start}: FROM {rest!r} is not `FROM IMAGE [AS NAME]`")
        else:
            if not stages:
                raise Fail(f"{path}:{start}: {keyword} before the first FROM")
            stages[-1]["instructions"].append((keyword, rest, start))
    if not stages:
        raise Fail(f"{path}: no FROM")
    return stages


def select_stage(stages, target, path):
    if target is None:
        return stages[-1]
    for s in stages:
        if s["name"] == target:
            return s
    raise Fail(f"{path}: no stage named {target!r}")


def exec_or_shell(text):
    """ENTRYPOINT/CMD: the JSON (exec) form, or the shell form wrapped in /bin/sh -c."""
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return ["/bin/sh", "-c", text]


def pairs(text, where):
    """`k=v k2="v 2"` (ENV, LABEL), or the legacy `ENV k v`."""
    words = shlex.split(text)
    if words and "=" not in words[0]:
        return [(words[0], text.split(None, 1)[1] if len(words) > 1 else "")]
    out = []
    for w in words:
        k, sep, v = w.partition("=")
        if not sep or not k:
            raise Fail(f"{where}: {w!r} is not KEY=VALUE")
        out.append((k, v))
    return out


def apt_packages(run_text, where):
    """The packages of an `apt-get update && apt-get install … && rm -rf /var/lib/apt/lists/*` RUN, or
    None when the RUN is something else."""
    if "apt-get" not in run_text:
        return None
    packages = []
    for segment in re.split(r"&&", run_text):
        words = shlex.split(segment.replace("\n", " "))
        words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]  # DEBIAN_FRONTEND=…
        if not words:
            continue
        if words[:2] == ["apt-get", "update"] or words[:2] == ["rm", "-rf"] and all(
            w.startswith("/var/lib/apt/lists") for w in words[2:]
        ):
            continue
        if words[0] == "apt-get" and "install" in words:
            packages += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
            continue
        raise Fail(f"{where}: RUN mixes apt-get with {' '.join(words)!r}, which is not handled")
    return packages


def parse_copy(text, where):
    flags, words = {}, shlex.split(text) if not text.startswith("[") else json.loads(text)
    while words and words[0].startswith("--"):
        k, _, v = words.pop(0)[2:].partition("=")
        if k not in ("from", "chmod", "chown"):
            raise Fail(f"{where}: COPY --{k} is not handled")
        flags[k] = v
    if len(words) < 2:
        raise Fail(f"{where}: COPY needs a source and a destination")
    return flags, words[:-1], words[-1]


# ---- the build stage, run on the host -------------------------------------------------------------------

def remap(text, outputs, stagedir, workdir):
    """The RUN text with each copied output path (`/injector`) moved into `stagedir`, and the stage's
    WORKDIR (the repository) mapped to the repository."""
    for path in sorted(outputs, key=len, reverse=True):
        text = re.sub(r"(?<![\w./$-])" + re.escape(path) + r"(?![\w.-])", stagedir + path, text)
    if workdir:
        text = re.sub(r"(?<![\w./$-])" + re.escape(workdir) + r"(?=/|\s|$)", ROOT, text)
    return text


def dpkg_installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.endswith("installed")


def run_build_stage(stage, outputs, stagedir, path):
    """Runs a builder stage's instructions on this host; its outputs land in `stagedir`."""
    workdir, env = None, dict(os.environ)
    for keyword, text, line in stage["instructions"]:
        where = f"{path}:{line}"
        if keyword == "WORKDIR":
            workdir = text
        elif keyword == "COPY":
            if text.split() != [".", "."]:
                raise Fail(f"{where}: a builder stage may only `COPY . .` (the repository), not {text!r}")
        elif keyword == "ENV":
            env.update(pairs(text, where))
        elif keyword == "RUN":
            packages = apt_packages(text, where)
            if packages is not None:
                missing = [p for p in packages if not dpkg_installed(p)]
                if missing:
                    raise Fail(f"{where}: the build stage installs {' '.join(missing)}; install it on this host "
                               f"(apt-get install {' '.join(missing)}; scripts/test.sh does)")
                continue
            command = remap(text, outputs, stagedir, workdir)
            log(f"{path}: RUN {' '.join(command.split())}")
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=ROOT, env=env,
                               stdout=sys.stderr)
            if r.returncode != 0:
                raise Fail(f"{where}: the RUN failed (exit {r.returncode})")
        else:
            raise Fail(f"{where}: {keyword} in a builder stage is not handled")
    for out in outputs:
        if not os.path.lexists(stagedir + out):
            raise Fail(f"{path}: the build stage did not produce {out}")


# ---- the Debian base --------------------------------------------------------------------------------------

def debian_rootfs(packages):
    """A cached debootstrapped bookworm rootfs with `packages`, slimmed; returns (dir, key)."""
    recipe = {
        "suite": "bookworm", "variant": "minbase", "mirror": DEBIAN_MIRROR,
        "packages": sorted(set(packages)), "slim": [SLIM_VERSION, SLIM_REMOVE, sorted(SLIM_RECREATE.items())],
    }
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    final = os.path.join(CACHE, key)
    if os.path.isdir(final):
        return final, key
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, f"{key}.lock"), "w") as lock:
        # Two first builds at once: the second waits here, then finds the first one's result.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(final):
            return final, key
        if not shutil.which("debootstrap"):
            raise Fail("debootstrap is missing (apt-get install debootstrap; scripts/test.sh does)")
        tmp = tempfile.mkdtemp(dir=CACHE, prefix=f"{key}.tmp.")
        start = time.time()
        log(f"debootstrap bookworm (minbase + {', '.join(recipe['packages']) or 'nothing'}) into {tmp} ...")
        try:
            cmd = ["debootstrap", "--variant=minbase"]
            if recipe["packages"]:
                cmd.append("--include=" + ",".join(recipe["packages"]))
            cmd += ["bookworm", tmp, DEBIAN_MIRROR]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                raise Fail(f"debootstrap failed (exit {r.returncode}):\n{r.stdout[-3000:]}")
            slim(tmp)
            os.rename(tmp, final)
        except BaseException:
            subprocess.run(["umount", "-R", os.path.join(tmp, "proc")], capture_output=True)
            subprocess.run(["umount", "-R", os.path.join(tmp, "sys")], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log(f"debian rootfs {key} built in {time.time() - start:.0f} s")
    return final, key


def slim(root):
    os.chmod(root, 0o755)  # mkdtemp made it 0700
    doc = os.path.join(root, "usr/share/doc")
    for pkg in os.listdir(doc) if os.path.isdir(doc) else []:
        d = os.path.join(doc, pkg)
        if os.path.isdir(d) and not os.path.islink(d):
            for entry in os.listdir(d):
                if entry != "copyright":
                    p = os.path.join(d, entry)
                    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    for rel in SLIM_REMOVE:
        p = os.path.join(root, rel)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.remove(p)
    for rel, mode in SLIM_RECREATE.items():
        p = os.path.join(root, rel)
        os.makedirs(p, exist_ok=True)
        os.chmod(p, mode)
    for dirpath, _, files in os.walk(os.path.join(root, "var")):
        for f in files:
            if f.endswith("-old"):
                os.remove(os.path.join(dirpath, f))


# ---- from a plan to an archive ----------------------------------------------------------------------------

def write_archive(name, base_dir, base_key, adds, config, history):
    """Writes OUT/<name>.tar unless the one there has the same inputs; returns (path, built?)."""
    os.makedirs(OUT, exist_ok=True)
    archive = os.path.join(OUT, f"{name}.tar")
    inputs = {
        "ref": ref(name), "writer": sha256_file(WRITER), "planner": sha256_file(os.path.abspath(__file__)),
        "base": base_key, "config": config, "history": history,
        # What lands where, by content: the host paths (a fresh staging folder each run) do not count.
        "adds": [[a.split(":", 1)[1], sha256_tree(a.split(":")[0])] for a in adds],
    }
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    key_file = archive + ".key"
    if os.path.exists(archive) and os.path.exists(key_file) and open(key_file).read().strip() == key:
        return archive, False
    cmd = [sys.executable, WRITER, "--name", ref(name), "--out", archive, "--config", json.dumps(config)]
    if base_dir:
        cmd += ["--base-rootfs", base_dir]
    for a in adds:
        cmd += ["--add", a]
    for h in history:
        cmd += ["--created-by", h]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if r.returncode != 0:
        raise Fail(f"{name}: image-archive.py failed (exit {r.returncode})")
    with open(key_file, "w") as f:
        f.write(key + "\n")
    return archive, True


def build_dockerfile_image(name, dockerfile, target, staging):
    path = os.path.join(ROOT, dockerfile)
    stages = parse_dockerfile(path)
    final = select_stage(stages, target, dockerfile)
    by_name = {s["name"]: s for s in stages if s["name"]}

    # What the final stage copies out of each builder stage.
    wanted = {}
    for keyword, text, line in final["instructions"]:
        if keyword == "COPY":
            flags, sources, _ = parse_copy(text, f"{dockerfile}:{line}")
            if "from" in flags:
                if flags["from"] not in by_name:
                    raise Fail(f"{dockerfile}:{line}: COPY --from={flags['from']}: no such stage")
                wanted.setdefault(flags["from"], set()).update(sources)
    stage_dirs = {}
    for stage_name, outputs in wanted.items():
        for o in outputs:
            if not o.startswith("/"):
                raise Fail(f"{dockerfile}: COPY --from={stage_name} {o}: only absolute sources are handled")
        d = os.path.join(staging, f"{name}-{stage_name}")
        os.makedirs(d, exist_ok=True)
        run_build_stage(by_name[stage_name], outputs, d, dockerfile)
        stage_dirs[stage_name] = d

    base = final["base"]
    if base not in BASES:
        raise Fail(f"{dockerfile}: base {base!r} cannot be made here (only {', '.join(BASES)})")
    config = json.loads(json.dumps(BASES[base]))
    cmd_set = False
    packages, adds, history = [], [], []
    for keyword, text, line in final["instructions"]:
        where = f"{dockerfile}:{line}"
        if "$" in text and keyword not in ("RUN",):
            raise Fail(f"{where}: variable substitution is not handled: {text!r}")
        if keyword == "RUN":
            p = apt_packages(text, where)
            if p is None or base != "debian:bookworm-slim":
                raise Fail(f"{where}: only `apt-get install` on the Debian base is handled in a final stage")
            packages += p
        elif keyword == "COPY":
            flags, sources, dst = parse_copy(text, where)
            if not dst.startswith("/"):
                dst = os.path.join(config.get("WorkingDir") or "/", dst)
            mode = flags.get("chmod", "")
            owner = ""
            if "chown" in flags:
                u, _, g = flags["chown"].partition(":")
                if not (u.isdigit() and (g or u).isdigit()):
                    raise Fail(f"{where}: --chown={flags['chown']}: only numeric uid:gid is handled")
                owner = f":{u}:{g or u}"
                mode = mode or ""
            for src in sources:
                host = stage_dirs[flags["from"]] + src if "from" in flags else os.path.join(ROOT, src)
                if not os.path.lexists(host):
                    raise Fail(f"{where}: COPY source {src} does not exist ({host})")
                target_path = dst
                if dst.endswith("/") or len(sources) > 1:
                    if not os.path.isdir(host):
                        target_path = dst.rstrip("/") + "/" + os.path.basename(src.rstrip("/"))
                spec = f"{host}:{target_path}"
                if mode or owner:
                    spec += f":{mode}{owner}"
                adds.append(spec)
            history.append(f"COPY {text}")
        elif keyword == "ENV":
            env = config.setdefault("Env", [])
            for k, v in pairs(text, where):
                entry = f"{k}={v}"
                for i, e in enumerate(env):
                    if e.split("=", 1)[0] == k:
                        env[i] = entry
                        break
                else:
                    env.append(entry)
        elif keyword == "ENTRYPOINT":
            config["Entrypoint"] = exec_or_shell(text)
            if not cmd_set:
                config.pop("Cmd", None)  # BuildKit: ENTRYPOINT resets a CMD the stage did not set itself
        elif keyword == "CMD":
            config["Cmd"] = exec_or_shell(text)
            cmd_set = True
        elif keyword == "USER":
            config["User"] = text
        elif keyword == "WORKDIR":
            config["WorkingDir"] = os.path.normpath(os.path.join(config.get("WorkingDir") or "/", text))
        elif keyword == "EXPOSE":
            ports = config.setdefault("ExposedPorts", {})
            for p in text.split():
                ports[p if "/" in p else f"{p}/tcp"] = {}
        elif keyword == "LABEL":
            config.setdefault("Labels", {}).update(pairs(text, where))
        else:
            raise Fail(f"{where}: {keyword} is not handled in a final stage")
    base_dir = base_key = None
    if base == "debian:bookworm-slim":
        base_dir, base_key = debian_rootfs(packages)
        history.insert(0, f"debian:bookworm-slim (debootstrap {base_key})")
    # One layer for all COPYs: the writer's --created-by wants one line per layer.
    layers = ([history[0]] if base_dir else []) + ["; ".join(h for h in history if h.startswith("COPY"))]
    return write_archive(name, base_dir, base_key, adds, config, layers)


def build_pause(staging):
    """registry.k8s.io/pause's binary, from the k8s.io/kubernetes module tools/k8s pins."""
    gomod = os.path.join(ROOT, "tools", "k8s", "go.mod")
    version = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", open(gomod).read(), re.M)
    if not version:
        raise Fail(f"{gomod}: no k8s.io/kubernetes requirement")
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not go:
        raise Fail("pause: the Go toolchain (go) is needed to find the k8s.io/kubernetes module")
    modcache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    src = os.path.join(modcache, f"k8s.io/kubernetes@{version.group(1)}", "build/pause/linux/pause.c")
    if not os.path.exists(src):
        subprocess.run([go, "mod", "download", f"k8s.io/kubernetes@{version.group(1)}"],
                       cwd=os.path.dirname(gomod), check=True, stdout=sys.stderr)
    out = os.path.join(staging, "pause")
    subprocess.run(["gcc", "-Os", "-Wall", "-Werror", "-static", f'-DVERSION="{version.group(1)}"',
                    "-o", out, src], check=True)
    subprocess.run(["strip", out], check=True)
    # As registry.k8s.io/pause: the binary alone, run as 65535.
    config = {"Env": [DEFAULT_PATH], "WorkingDir": "/", "Entrypoint": ["/pause"], "User": "65535:65535"}
    return write_archive("pause", None, None, [f"{out}:/pause:0755"], config,
                         [f"gcc -static {os.path.relpath(src, modcache)}"])


def build_pilot_agent():
    """Istio's own pilot-agent (scripts/istio-peers.sh) on the Debian base with iptables and iproute2, for
    the benchmark arm whose init container is `pilot-agent istio-iptables`."""
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "istio-peers.sh"), "build"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Fail(f"scripts/istio-peers.sh build failed:\n{r.stderr[-3000:]}")
    binary = next((line.split("=", 1)[1] for line in r.stdout.splitlines() if line.startswith("pilot-agent=")), None)
    if not binary:
        raise Fail("scripts/istio-peers.sh printed no pilot-agent=PATH")
    base_dir, base_key = debian_rootfs(["iptables", "iproute2"])
    config = {"Env": [DEFAULT_PATH], "Entrypoint": ["/usr/local/bin/pilot-agent"]}
    return write_archive("istio-pilot-agent", base_dir, base_key, [f"{binary}:/usr/local/bin/pilot-agent:0755"],
                         config, [f"debian:bookworm-slim (debootstrap {base_key})", "pilot-agent"])


def archive_size(path):
    return os.path.getsize(path)


def build(names):
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise Fail(f"unknown image {', '.join(unknown)} (known: {', '.join(ALL)})")
    names = names or ALL
    lines = [f"HUB={HUB}", f"TAG={TAG}"]
    with tempfile.TemporaryDirectory(prefix="images-stage.", dir=os.path.join(ROOT, "target")) as staging:
        for name in names:
            start = time.time()
            if name == "pause":
                archive, built = build_pause(staging)
            elif name == "istio-pilot-agent":
                archive, built = build_pilot_agent()
            else:
                _, dockerfile, target = next(i for i in DOCKERFILE_IMAGES if i[0] == name)
                archive, built = build_dockerfile_image(name, dockerfile, target, staging)
            size = archive_size(archive)
            log(f"{name}: {ref(name)} {size} bytes ({size / 1048576:.1f} MiB), "
                f"{'written' if built else 'unchanged'} in {time.time() - start:.1f} s")
            lines += [f"{name}={ref(name)}", f"{name}_ARCHIVE={archive}"]
    # images.env lists every image built so far (a build of some names keeps the others' entries).
    manifest = os.path.join(OUT, "images.env")
    known = {}
    if os.path.exists(manifest):
        known = dict(line.split("=", 1) for line in open(manifest).read().split() if "=" in line)
    known.update(line.split("=", 1) for line in lines)
    merged = [f"HUB={HUB}", f"TAG={TAG}"]
    for n in ALL:
        archive = known.get(f"{n}_ARCHIVE")
        if archive and known.get(n) == ref(n) and os.path.exists(archive):
            merged += [f"{n}={ref(n)}", f"{n}_ARCHIVE={archive}"]
    tmp = f"{manifest}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(merged) + "\n")
    os.replace(tmp, manifest)
    print("\n".join(lines))


def read_env(path):
    """DIR/env's variables, as a shell sees them after sourcing it."""
    if not os.path.exists(path):
        raise Fail(f"{path}: no such file (start the cluster with scripts/cluster.sh up DIR --nodes N)")
    r = subprocess.run(["bash", "-c", 'set -a; . "$1" >/dev/null; env -0', "_", path],
                       capture_output=True, check=True)
    env = {}
    for item in r.stdout.split(b"\0"):
        k, sep, v = item.decode().partition("=")
        if sep:
            env[k] = v
    return env


def load(cluster_dir, names):
    """Imports the archives into every node's containerd (namespace k8s.io, where the kubelet looks). The
    nodes are those `scripts/cluster.sh up DIR --nodes N` writes into DIR/env: NODES=N, and per node i
    NODE<i>_NAME and NODE<i>_CONTAINERD_SOCK (the node's containerd socket, a host path)."""
    env = read_env(os.path.join(cluster_dir, "env"))
    count = env.get("NODES", "")
    if not count.isdigit() or int(count) == 0:
        raise Fail(f"{cluster_dir}/env: NODES={count!r}: no nodes to load into "
                   "(start the cluster with scripts/cluster.sh up DIR --nodes N)")
    manifest = os.path.join(OUT, "images.env")
    if not os.path.exists(manifest):
        raise Fail(f"{manifest}: no images built yet (scripts/images.sh build)")
    built = dict(line.split("=", 1) for line in open(manifest).read().split())
    names = names or [k for k in built if k in ALL]
    for i in range(1, int(count) + 1):
        node = env.get(f"NODE{i}_NAME", f"node{i}")
        sock = env.get(f"NODE{i}_CONTAINERD_SOCK")
        if not sock:
            raise Fail(f"{cluster_dir}/env: NODE{i}_CONTAINERD_SOCK is not set for node {node}")
        for name in names:
            archive = built.get(f"{name}_ARCHIVE")
            if not archive:
                raise Fail(f"{name}: not built (scripts/images.sh build {name})")
            r = subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "images", "import", archive],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise Fail(f"node {node}: importing {archive}: {r.stderr.strip() or r.stdout.strip()}")
            log(f"node {node}: {built[name]}")


def main(argv):
    if not argv or argv[0] not in ("build", "load", "refs"):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        print("usage: scripts/images.sh build [NAME...] | load DIR [NAME...] | refs", file=sys.stderr)
        return 2
    if argv[0] == "build":
        build(argv[1:])
    elif argv[0] == "refs":
        print("\n".join([f"HUB={HUB}", f"TAG={TAG}"] + [f"{n}={ref(n)}" for n in ALL]))
    else:
        if len(argv) < 2:
            raise Fail("usage: scripts/images.sh load DIR [NAME...]")
        load(argv[1], argv[2:])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Fail as e:
        print(f"images: {e}", file=sys.stderr)
        sys.exit(1)
