#!/usr/bin/env python3
"""Assemble a C++ / CMake / shell text corpus from Debian packages on this machine.

Every file is recorded with the Debian package (and version) that ships it
(`dpkg -S`, `dpkg-query -W`), deduplicated by content hash (sha256) and split by
FILE into train / heldout (sha256 of the content mod 10 == 0 -> heldout, so a
file's split never depends on which other files were picked).

Output: a .tar.gz holding
    corpus/manifest.json                  sources, packages + versions, one entry per file
    corpus/{train,heldout}/{cpp,cmake,shell}/<sha12>_<basename>

    python3 tools/tokenizer/make_corpus.py --out /work/tokcorpus/corpus_small.tar.gz
    python3 tools/tokenizer/make_corpus.py --size large --apt-download \
        --out /work/tokcorpus/corpus_large.tar.gz          # hundreds of MB, see README

--size large raises every byte budget, walks all of /usr/include, and (with
--apt-download) fetches more header packages with `apt-get download` (no root
needed) and unpacks them with `dpkg -x` into --apt-cache; their files are
recorded with the package version from the .deb.  Nothing is installed.
"""
import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time

CPP_EXT = ('.h', '.hh', '.hpp', '.hxx', '.h++', '.tcc', '.ipp', '.inl', '.inc', '.cc', '.cpp', '.cxx')
SHEBANG = re.compile(rb'^#!\s*(/usr)?/bin/(env\s+)?(ba|da)?sh\b')

# Header packages that exist in Debian bookworm (apt-cache policy, 2026-11) and are
# not installed here; --apt-download fetches these.  llvm-14-dev, libstdc++-12-dev,
# libgtest-dev, libbenchmark-dev are already installed and walked in place.
APT_PACKAGES = ['libboost1.81-dev', 'libeigen3-dev', 'qtbase5-dev', 'qt6-base-dev',
                'libclang-14-dev', 'libfmt-dev', 'nlohmann-json3-dev', 'libabsl-dev',
                'libspdlog-dev', 'catch2', 'libopencv-core-dev']
# Shell-rich packages (sh / bash scripts, completions, maintainer-style helpers) for the
# shell specialist; fetched with --apt-download like the header packages.
APT_SHELL_PACKAGES = ['bash-completion', 'devscripts', 'dkms', 'libtool', 'initramfs-tools-core',
                      'dracut-core', 'debootstrap', 'grub-common', 'neofetch', 'autotools-dev',
                      'bash-doc', 'shunit2', 'xdg-utils', 'pbuilder', 'byobu', 'git',
                      'live-build', 'cloud-init', 'zram-tools', 'firejail']
BASH_COMPLETION = '/bash-completion/completions/'
MAINTAINER_SCRIPT = re.compile(r'^([a-z0-9][a-z0-9+.-]+)(:[a-z0-9]+)?\.(preinst|postinst|prerm|postrm|config)$')

MB = 1 << 20
# (source name, category, budget small, budget large)
BUDGETS = {
    'libstdc++':        ('cpp', 1.5 * MB, 40 * MB),
    'gtest_benchmark':  ('cpp', 0.5 * MB, 10 * MB),
    'other_cpp':        ('cpp', 0.7 * MB, 300 * MB),
    'cmake_modules':    ('cmake', 0.6 * MB, 20 * MB),
    'cmake_help':       ('cmake', 0.3 * MB, 20 * MB),
    'cmake_other':      ('cmake', 0.2 * MB, 20 * MB),
    'shell':            ('shell', 1.0 * MB, 60 * MB),
}


def walk(root, follow=False):
    for dirpath, dirnames, filenames in os.walk(root, followlinks=follow):
        dirnames.sort()
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            yield p


def is_cpp_header(path, under_cxx_std):
    if path.endswith(CPP_EXT):
        return True
    # libstdc++ has extension-less headers (<vector>); so do Qt (QString) and Eigen (Dense)
    base = os.path.basename(path)
    return under_cxx_std and '.' not in base


def is_shell(p):
    """A #!/bin/sh or bash script, or a bash completion file (bash code without a shebang)."""
    if BASH_COMPLETION in p:
        return True
    try:
        with open(p, 'rb') as fh:
            head = fh.read(64)
    except OSError:
        return False
    return bool(SHEBANG.match(head))


def shell_candidates(roots):
    for root in roots:
        for p in walk(root):
            if is_shell(p):
                yield p


def maintainer_scripts(info='/var/lib/dpkg/info'):
    """Debian maintainer scripts (postinst, ...): shell, owned by the package they name."""
    if not os.path.isdir(info):
        return
    for f in sorted(os.listdir(info)):
        m = MAINTAINER_SCRIPT.match(f)
        p = os.path.join(info, f)
        if m and is_shell(p):
            yield p, m.group(1)


def candidates(args):
    """Yield (source, path, package_override) in a fixed order."""
    inc = '/usr/include'
    for d in sorted(os.listdir(os.path.join(inc, 'c++'))):
        for p in walk(os.path.join(inc, 'c++', d)):
            yield 'libstdc++', p, None
    for d in ('gtest', 'gmock', 'benchmark'):
        if os.path.isdir(os.path.join(inc, d)):
            for p in walk(os.path.join(inc, d)):
                yield 'gtest_benchmark', p, None
    skip = {os.path.join(inc, d) for d in ('c++', 'gtest', 'gmock', 'benchmark')}
    for d in sorted(os.listdir(inc)):
        full = os.path.join(inc, d)
        if full in skip or not os.path.isdir(full):
            continue
        for p in walk(full):
            if p.endswith(CPP_EXT[1:]) or (p.endswith('.h') and (args.size == 'large' or d.startswith('llvm'))):
                yield 'other_cpp', p, None
    for cm in sorted(x for x in os.listdir('/usr/share') if x.startswith('cmake-')):
        for p in walk(os.path.join('/usr/share', cm, 'Modules')):
            if p.endswith('.cmake') or os.path.basename(p) == 'CMakeLists.txt':
                yield 'cmake_modules', p, None
        for p in walk(os.path.join('/usr/share', cm, 'Help')):
            if p.endswith('.rst'):
                yield 'cmake_help', p, None
    for root in ('/usr/lib', '/usr/share', '/usr/src'):
        for p in walk(root):
            if '/cmake-' in p and p.startswith('/usr/share/cmake-'):
                continue
            if p.endswith('.cmake') or os.path.basename(p) == 'CMakeLists.txt':
                yield 'cmake_other', p, None
    for p in shell_candidates(('/usr/bin', '/usr/sbin', '/usr/share', '/etc', '/usr/lib', '/usr/libexec')):
        yield 'shell', p, None
    versions = None
    for p, pkg in maintainer_scripts():
        if versions is None:
            versions = dpkg_versions({m.group(1) for m in (MAINTAINER_SCRIPT.match(f) for f in
                                      os.listdir('/var/lib/dpkg/info')) if m})
        yield 'shell', p, (pkg, versions.get(pkg, ''))
    if args.apt_download:
        for pkg, ver, root in fetch_apt(args, args.apt_packages.split(',') + args.apt_shell_packages.split(',')):
            for p in walk(root):
                if p.endswith('.cmake') or os.path.basename(p) == 'CMakeLists.txt':
                    yield 'cmake_other', p, (pkg, ver)
                elif is_cpp_header(p, '/include/' in p):
                    yield 'other_cpp', p, (pkg, ver)
                elif is_shell(p):
                    yield 'shell', p, (pkg, ver)


def fetch_apt(args, packages):
    os.makedirs(args.apt_cache, exist_ok=True)
    for pkg in packages:
        debs = [f for f in os.listdir(args.apt_cache) if f.startswith(pkg + '_') and f.endswith('.deb')]
        if not debs:
            r = subprocess.run(['apt-get', 'download', pkg], cwd=args.apt_cache,
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f'apt-get download {pkg} failed: {r.stderr.strip()[:200]}', file=sys.stderr)
                continue
            debs = [f for f in os.listdir(args.apt_cache) if f.startswith(pkg + '_') and f.endswith('.deb')]
        deb = os.path.join(args.apt_cache, sorted(debs)[-1])
        ver = subprocess.run(['dpkg-deb', '-f', deb, 'Version'], capture_output=True, text=True).stdout.strip()
        root = os.path.join(args.apt_cache, 'x', pkg)
        if not os.path.isdir(root):
            os.makedirs(os.path.dirname(root), exist_ok=True)
            subprocess.run(['dpkg', '-x', deb, root + '.tmp'], check=True)
            os.rename(root + '.tmp', root)
        yield pkg, ver, root


def dpkg_owners(paths):
    """path -> package name ('' when no package owns it)."""
    owner = {}
    todo = list(paths)
    for attempt in range(2):
        missing = []
        for i in range(0, len(todo), 200):
            chunk = todo[i:i + 200]
            q = chunk if attempt == 0 else [alt for alt in (alt_path(p) for p in chunk)]
            r = subprocess.run(['dpkg', '-S'] + q, capture_output=True, text=True)
            found = {}
            for line in r.stdout.splitlines():
                if line.startswith('diversion by'):
                    continue
                pk, _, path = line.partition(': ')
                found[path] = pk.split(',')[0].strip().split(':')[0]
            for orig, asked in zip(chunk, q):
                if asked in found:
                    owner[orig] = found[asked]
                else:
                    missing.append(orig)
        todo = [p for p in missing if alt_path(p) != p]
        for p in missing:
            owner.setdefault(p, '')
        if not todo:
            break
    return owner


def alt_path(p):
    # merged /usr: dpkg may have recorded /bin/x, /sbin/x, /lib/x
    for pre in ('/usr/bin/', '/usr/sbin/', '/usr/lib/'):
        if p.startswith(pre):
            return p[4:]
    return p


def dpkg_versions(pkgs):
    if not pkgs:
        return {}
    r = subprocess.run(['dpkg-query', '-W', '-f', '${Package}\t${Version}\n'] + sorted(pkgs),
                       capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        name, _, ver = line.partition('\t')
        out[name.split(':')[0]] = ver
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', required=True, help='output .tar.gz')
    ap.add_argument('--size', choices=('small', 'large'), default='small',
                    help='small: a few MB (tokenizer tests); large: hundreds of MB (model training)')
    ap.add_argument('--scale', type=float, default=1.0, help='multiply every byte budget')
    ap.add_argument('--max-file-kb', type=int, default=None, help='skip larger files (small: 200, large: 2048)')
    ap.add_argument('--heldout-mod', type=int, default=10, help='sha256 %% N == 0 -> heldout')
    ap.add_argument('--apt-download', action='store_true',
                    help='also apt-get download + dpkg -x the header packages in --apt-packages')
    ap.add_argument('--apt-packages', default=','.join(APT_PACKAGES))
    ap.add_argument('--apt-shell-packages', default=','.join(APT_SHELL_PACKAGES))
    ap.add_argument('--apt-cache', default='/work/tokcorpus/apt')
    args = ap.parse_args()
    max_file = (args.max_file_kb or (200 if args.size == 'small' else 2048)) * 1024
    t0 = time.time()

    seen = set()
    pool = {s: [] for s in BUDGETS}        # source -> [(sha, path, data, pkg_override)]
    skipped = {'not_utf8': 0, 'too_big': 0, 'duplicate': 0, 'empty': 0}
    for source, path, override in candidates(args):
        try:
            size = os.path.getsize(path)
            if size > max_file:
                skipped['too_big'] += 1
                continue
            with open(path, 'rb') as fh:
                data = fh.read()
        except OSError:
            continue
        if not data.strip():
            skipped['empty'] += 1
            continue
        try:
            data.decode('utf-8')
        except UnicodeDecodeError:
            skipped['not_utf8'] += 1
            continue
        sha = hashlib.sha256(data).hexdigest()
        if sha in seen:
            skipped['duplicate'] += 1
            continue
        seen.add(sha)
        pool[source].append((sha, path, data, override))

    picked = []
    for source, items in pool.items():
        cat, small, large = BUDGETS[source]
        budget = (small if args.size == 'small' else large) * args.scale
        used = 0
        for sha, path, data, override in sorted(items):      # sha order = deterministic shuffle
            if used + len(data) > budget:
                continue
            used += len(data)
            picked.append((source, cat, sha, path, data, override))
        print(f'{source:16s} {cat:6s} candidates {len(items):6d}  picked {used / MB:8.2f} MB', file=sys.stderr)

    owners = dpkg_owners([p for _, _, _, p, _, o in picked if o is None])
    versions = dpkg_versions({o for o in owners.values() if o})
    for *_, o in picked:
        if o is not None:
            versions[o[0]] = o[1]

    files = []
    tar_members = []
    for source, cat, sha, path, data, override in sorted(picked, key=lambda x: x[3]):
        pkg = override[0] if override else owners.get(path, '')
        split = 'heldout' if int(sha, 16) % args.heldout_mod == 0 else 'train'
        name = f'corpus/{split}/{cat}/{sha[:12]}_{os.path.basename(path)}'
        files.append({'name': name, 'path': path, 'sha256': sha, 'bytes': len(data), 'category': cat,
                      'source': source, 'package': pkg, 'version': versions.get(pkg, ''), 'split': split})
        tar_members.append((name, data))

    totals = {}
    for f in files:
        k = f'{f["split"]}/{f["category"]}'
        totals.setdefault(k, [0, 0])
        totals[k][0] += 1
        totals[k][1] += f['bytes']
    pkgs = {}
    for f in files:
        p = pkgs.setdefault(f['package'] or '(no package)', {'version': f['version'], 'files': 0, 'bytes': 0})
        p['files'] += 1
        p['bytes'] += f['bytes']
    manifest = {
        'created_by': 'tools/tokenizer/make_corpus.py ' + ' '.join(sys.argv[1:]),
        'created_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        'size': args.size, 'scale': args.scale, 'max_file_bytes': max_file,
        'heldout_rule': f'int(sha256(content), 16) % {args.heldout_mod} == 0',
        'skipped': skipped,
        'totals': {k: {'files': v[0], 'bytes': v[1]} for k, v in sorted(totals.items())},
        'packages': dict(sorted(pkgs.items())),
        'files': files,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with tarfile.open(args.out, 'w:gz') as tar:
        def add(name, blob):
            ti = tarfile.TarInfo(name)
            ti.size = len(blob)
            ti.mtime = 0
            tar.addfile(ti, io.BytesIO(blob))
        add('corpus/manifest.json', json.dumps(manifest, indent=1, ensure_ascii=False).encode())
        for name, data in tar_members:
            add(name, data)
    for k, v in sorted(totals.items()):
        print(f'{k:16s} {v[0]:6d} files {v[1] / MB:8.2f} MB', file=sys.stderr)
    print(f'packages: {len(pkgs)}; skipped {skipped}; wrote {args.out} '
          f'({os.path.getsize(args.out) / MB:.2f} MB) in {time.time() - t0:.0f} s', file=sys.stderr)


if __name__ == '__main__':
    main()
