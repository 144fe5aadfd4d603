#!/usr/bin/env python3
"""Writes a container image as a reproducible docker-archive tar (what `docker save` writes and
`ctr images import` / `docker load` read), with no daemon, no registry and nothing but the standard library.

    image-archive.py --name REF [--name REF ...] --out FILE
                     [--base-rootfs DIR]
                     [--add SRC:DST[:MODE[:UID:GID]] ...]
                     [--dir DST[:MODE[:UID:GID]] ...]
                     [--symlink DST:TARGET ...]
                     [--config JSON] [--created-by TEXT ...]

The image has one layer per source: the base root file system when --base-rootfs is given (its files'
modes, owners, symlinks and hard links as they are on disk; devices and sockets are left out), then one
layer with everything --add, --dir and --symlink name. Missing parent directories of an added path are
created as root:root 0755, as `COPY` does. An --add SRC that is a directory is added recursively, its
symlinks kept as symlinks (COPY's behaviour for a directory source). MODE is octal (default: the source's
permission bits); UID:GID default to 0:0.

--config is the image config's `config` object: any of User, Env, Entrypoint, Cmd, WorkingDir,
ExposedPorts, Labels, StopSignal, Volumes (Docker's names and JSON types). --created-by gives one history
line per layer, in order.

Reproducible: entries sorted, every mtime 0, no user or group names, uncompressed layers; the same inputs
give the same bytes. Prints the image ID (the config's sha256) on stdout.
"""

import argparse
import hashlib
import io
import json
import os
import re
import stat
import sys
import tarfile
import tempfile

CONFIG_KEYS = {
    "User": str,
    "Env": list,
    "Entrypoint": list,
    "Cmd": list,
    "WorkingDir": str,
    "ExposedPorts": dict,
    "Labels": dict,
    "StopSignal": str,
    "Volumes": dict,
}
EPOCH = "1970-01-01T00:00:00Z"
# [host[:port]/]component(/component)*:tag, as the distribution reference grammar spells it.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}"
)


class Fail(Exception):
    pass


def parse_owner_mode(parts, what):
    """[MODE[:UID:GID]] -> (mode or None, uid, gid)."""
    mode, uid, gid = None, 0, 0
    if len(parts) >= 1 and parts[0] != "":
        try:
            mode = int(parts[0], 8)
        except ValueError:
            raise Fail(f"{what}: mode {parts[0]!r} is not octal")
        if not 0 <= mode <= 0o7777:
            raise Fail(f"{what}: mode {parts[0]!r} is out of range")
    if len(parts) == 3:
        try:
            uid, gid = int(parts[1]), int(parts[2])
        except ValueError:
            raise Fail(f"{what}: owner {parts[1]}:{parts[2]} is not numeric uid:gid")
    elif len(parts) not in (0, 1):
        raise Fail(f"{what}: expected MODE or MODE:UID:GID after the paths")
    return mode, uid, gid


def clean_dst(dst, what):
    if not dst.startswith("/"):
        raise Fail(f"{what}: destination {dst!r} is not absolute")
    parts = [p for p in dst.split("/") if p not in ("", ".")]
    if ".." in parts or not parts:
        raise Fail(f"{what}: destination {dst!r} must name a path below /")
    return "/".join(parts)


def tarinfo(name, kind, mode, uid, gid, size=0, linkname=""):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.uname = ti.gname = ""
    ti.mtime = 0
    ti.size = size
    ti.linkname = linkname
    return ti


class Layer:
    """Entries by path; written sorted, parents first."""

    def __init__(self):
        self.entries = {}  # name -> (TarInfo, source path or None)

    def ensure_parents(self, name):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = (tarinfo(d, tarfile.DIRTYPE, 0o755, 0, 0), None)

    def put(self, ti, src=None):
        self.ensure_parents(ti.name)
        self.entries[ti.name] = (ti, src)

    def write(self, path):
        """Writes the layer tar; returns (sha256 hex, size)."""
        with open(path, "wb") as f:
            with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(self.entries, key=sort_key):
                    ti, src = self.entries[name]
                    if ti.type == tarfile.REGTYPE and src is not None:
                        with open(src, "rb") as data:
                            tar.addfile(ti, data)
                    else:
                        tar.addfile(ti)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest(), os.path.getsize(path)


def add_tree(layer, src, dst, mode, uid, gid, what):
    """Adds file/dir/symlink `src` at `dst` (a clean relative name)."""
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        layer.put(tarinfo(dst, tarfile.SYMTYPE, 0o777, uid, gid, linkname=os.readlink(src)))
    elif stat.S_ISREG(st.st_mode):
        m = mode if mode is not None else stat.S_IMODE(st.st_mode)
        layer.put(tarinfo(dst, tarfile.REGTYPE, m, uid, gid, size=st.st_size), src)
    elif stat.S_ISDIR(st.st_mode):
        m = mode if mode is not None else stat.S_IMODE(st.st_mode)
        layer.put(tarinfo(dst, tarfile.DIRTYPE, m, uid, gid))
        for entry in sorted(os.listdir(src)):
            add_tree(layer, os.path.join(src, entry), f"{dst}/{entry}", None, uid, gid, what)
    else:
        raise Fail(f"{what}: {src} is neither a file, a directory nor a symlink")


def sort_key(name):
    return name.split("/")


def rootfs_layer(root):
    """The base layer: every file under `root` as it is on disk (owners, modes, links)."""
    if not os.path.isdir(root):
        raise Fail(f"--base-rootfs {root}: not a directory")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            found.append((os.path.relpath(full, root), full))
    found.sort(key=lambda e: sort_key(e[0]))
    layer = Layer()
    first_of_inode = {}  # a hard link must follow its target, so the first name in archive order is the file
    for rel, full in found:
        st = os.lstat(full)
        m, uid, gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
        if stat.S_ISDIR(st.st_mode):
            layer.entries[rel] = (tarinfo(rel, tarfile.DIRTYPE, m, uid, gid), None)
        elif stat.S_ISLNK(st.st_mode):
            layer.entries[rel] = (tarinfo(rel, tarfile.SYMTYPE, m, uid, gid, linkname=os.readlink(full)), None)
        elif stat.S_ISREG(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in first_of_inode:
                ti = tarinfo(rel, tarfile.LNKTYPE, m, uid, gid, linkname=first_of_inode[key])
                layer.entries[rel] = (ti, None)
            else:
                first_of_inode[key] = rel
                layer.entries[rel] = (tarinfo(rel, tarfile.REGTYPE, m, uid, gid, size=st.st_size), full)
        # devices, fifos and sockets are not part of an image: the runtime makes /dev
    return layer


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", action="append", required=True, help="image reference (repeatable)")
    ap.add_argument("--out", required=True, help="archive to write")
    ap.add_argument("--base-rootfs", help="directory whose contents are the base layer")
    ap.add_argument("--add", action="append", default=[], metavar="SRC:DST[:MODE[:UID:GID]]")
    ap.add_argument("--dir", action="append", default=[], metavar="DST[:MODE[:UID:GID]]")
    ap.add_argument("--symlink", action="append", default=[], metavar="DST:TARGET")
    ap.add_argument("--config", default="{}", help="the image config's `config` object, JSON")
    ap.add_argument("--created-by", action="append", default=[], help="history line per layer")
    args = ap.parse_args(argv)

    try:
        config = json.loads(args.config)
    except json.JSONDecodeError as e:
        raise Fail(f"--config: not JSON: {e}")
    if not isinstance(config, dict):
        raise Fail("--config: not a JSON object")
    for k, v in config.items():
        if k not in CONFIG_KEYS:
            raise Fail(f"--config: unknown key {k!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
        if v is not None and not isinstance(v, CONFIG_KEYS[k]):
            raise Fail(f"--config: {k} must be a {CONFIG_KEYS[k].__name__}")
    for ref in args.name:
        if not REFERENCE.fullmatch(ref):
            raise Fail(f"--name {ref!r}: not an image reference with a tag ([host[:port]/]path:tag, lower-case path)")

    layers = []
    if args.base_rootfs:
        layers.append(rootfs_layer(args.base_rootfs))
    top = Layer()
    for spec in args.add:
        parts = spec.split(":")
        if len(parts) < 2:
            raise Fail(f"--add {spec!r}: expected SRC:DST[:MODE[:UID:GID]]")
        what = f"--add {spec}"
        src, dst = parts[0], clean_dst(parts[1], what)
        mode, uid, gid = parse_owner_mode(parts[2:], what)
        if not os.path.lexists(src):
            raise Fail(f"{what}: {src} does not exist")
        add_tree(top, src, dst, mode, uid, gid, what)
    for spec in args.dir:
        parts = spec.split(":")
        what = f"--dir {spec}"
        dst = clean_dst(parts[0], what)
        mode, uid, gid = parse_owner_mode(parts[1:], what)
        top.put(tarinfo(dst, tarfile.DIRTYPE, 0o755 if mode is None else mode, uid, gid))
    for spec in args.symlink:
        dst, sep, target = spec.partition(":")
        if not sep or not target:
            raise Fail(f"--symlink {spec!r}: expected DST:TARGET")
        top.put(tarinfo(clean_dst(dst, f"--symlink {spec}"), tarfile.SYMTYPE, 0o777, 0, 0, linkname=target))
    if top.entries or not layers:
        layers.append(top)
    if args.created_by and len(args.created_by) != len(layers):
        raise Fail(f"--created-by: {len(args.created_by)} lines for {len(layers)} layers")

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".image-archive.") as tmp:
        diff_ids, layer_files = [], []
        for i, layer in enumerate(layers):
            path = os.path.join(tmp, f"layer{i}.tar")
            digest, _ = layer.write(path)
            diff_ids.append(f"sha256:{digest}")
            layer_files.append((f"{digest}/layer.tar", path))
        history = [
            {"created": EPOCH, "created_by": (args.created_by[i] if args.created_by else f"layer {i}")}
            for i in range(len(layers))
        ]
        image_config = {
            "architecture": "amd64",
            "os": "linux",
            "created": EPOCH,
            "config": {k: v for k, v in config.items() if v is not None},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": history,
        }
        config_bytes = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
        config_digest = hashlib.sha256(config_bytes).hexdigest()
        manifest = [{
            "Config": f"{config_digest}.json",
            "RepoTags": args.name,
            "Layers": [name for name, _ in layer_files],
        }]
        manifest_bytes = json.dumps(manifest, separators=(",", ":")).encode()

        def blob(tar, name, data):
            ti = tarinfo(name, tarfile.REGTYPE, 0o644, 0, 0, size=len(data))
            tar.addfile(ti, io.BytesIO(data))

        partial = os.path.join(tmp, "archive.tar")
        with open(partial, "wb") as f:
            with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name, path in layer_files:
                    tar.addfile(tarinfo(name.split("/")[0], tarfile.DIRTYPE, 0o755, 0, 0))
                    ti = tarinfo(name, tarfile.REGTYPE, 0o644, 0, 0, size=os.path.getsize(path))
                    with open(path, "rb") as data:
                        tar.addfile(ti, data)
                blob(tar, f"{config_digest}.json", config_bytes)
                blob(tar, "manifest.json", manifest_bytes)
        os.replace(partial, args.out)
    print(f"sha256:{config_digest}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Fail as e:
        print(f"image-archive: {e}", file=sys.stderr)
        sys.exit(1)
