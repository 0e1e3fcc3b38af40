#!/usr/bin/env python3
"""Pack the training corpus for the GPU machine (its calls carry at most 64 MiB, the
repository included): a subset of a make_corpus.py tarball as one .tar.xz.

    python3 tools/train/pack_corpus.py --corpus /work/tokcorpus/corpus_large.tar.gz \
        --out /work/train/corpus_train.tar.xz --cap libboost1.81-dev=60 --heldout-cpp-mb 4

Kept: every train file of every category (C++ for the model; CMake and shell too, so
the tokenizer is trained on all three domains the ensemble will need), minus what a
per-package cap (MB, `--cap PKG=MB`, files picked by content hash so the choice is
stable) leaves out; held-out C++ files up to --heldout-cpp-mb (by hash order), all
held-out CMake and shell. The manifest inside lists exactly the packed files with
their Debian package and version.
"""
import argparse
import io
import json
import lzma
import tarfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--corpus', required=True, help='make_corpus.py output (.tar.gz)')
    ap.add_argument('--out', required=True)
    ap.add_argument('--cap', action='append', default=[], help='PACKAGE=MB: at most that many MB of train files')
    ap.add_argument('--heldout-cpp-mb', type=float, default=4.0)
    ap.add_argument('--categories', default='cpp,cmake,shell', help='train categories to keep')
    args = ap.parse_args()
    caps = {k: float(v) * (1 << 20) for k, v in (c.split('=') for c in args.cap)}
    t0 = time.time()
    with tarfile.open(args.corpus) as tin:
        manifest = json.load(tin.extractfile('corpus/manifest.json'))
        files = sorted(manifest['files'], key=lambda f: f['sha256'])
        used, keep = {}, []
        held_cpp = 0
        for f in files:
            if f['split'] == 'heldout':
                if f['category'] == 'cpp':
                    if held_cpp + f['bytes'] > args.heldout_cpp_mb * (1 << 20):
                        continue
                    held_cpp += f['bytes']
                keep.append(f)
                continue
            if f['category'] not in args.categories.split(','):
                continue
            pkg = f['package']
            if pkg in caps and used.get(pkg, 0) + f['bytes'] > caps[pkg]:
                continue
            used[pkg] = used.get(pkg, 0) + f['bytes']
            keep.append(f)
        totals = {}
        for f in keep:
            k = f"{f['split']}/{f['category']}"
            t = totals.setdefault(k, {'files': 0, 'bytes': 0})
            t['files'] += 1
            t['bytes'] += f['bytes']
        sub = dict(manifest, files=keep, totals=totals,
                   packed_by='tools/train/pack_corpus.py ' + ' '.join(f'--cap {c}' for c in args.cap) +
                   f' --heldout-cpp-mb {args.heldout_cpp_mb} --categories {args.categories}')
        with lzma.open(args.out, 'wb', preset=6) as xz, tarfile.open(fileobj=xz, mode='w') as tout:
            blob = json.dumps(sub, indent=1).encode()
            ti = tarfile.TarInfo('corpus/manifest.json')
            ti.size = len(blob)
            tout.addfile(ti, io.BytesIO(blob))
            wanted = {f['name'] for f in keep}
            for m in tin:  # in stored order: a gzip stream cannot seek back cheaply
                if m.name in wanted:
                    data = tin.extractfile(m).read()
                    ti = tarfile.TarInfo(m.name)
                    ti.size = len(data)
                    tout.addfile(ti, io.BytesIO(data))
    for k, v in sorted(totals.items()):
        print(f'{k:14s} {v["files"]:6d} files {v["bytes"] / 1e6:8.2f} MB')
    import os
    print(f'wrote {args.out} ({os.path.getsize(args.out) / (1 << 20):.2f} MiB) in {time.time() - t0:.0f} s')


if __name__ == '__main__':
    main()
