#!/usr/bin/env python3
"""Generates include/slm/text/unicode_tables.hpp from the Unicode Character Database.

Reads (from UCD_DIR, default /usr/share/unicode, Debian's `unicode-data` package):
UnicodeData.txt, CaseFolding.txt, DerivedNormalizationProps.txt, PropList.txt,
DerivedCoreProperties.txt, ReadMe.txt (for the version).
    python3 tools/unicode/gen_unicode_tables.py [UCD_DIR] > include/slm/text/unicode_tables.hpp
See tools/unicode/README.md.
"""
import os, re, sys

UCD = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
CATS = "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co Cn".split()
BLOCK = 128           # general category stage-2 block size (code points)
LIMIT = 0x40000       # stage-1 covers [0, LIMIT); above it the few assigned ranges are fixed (checked below)


def read(name):
    with open(os.path.join(UCD, name), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield [x.strip() for x in line.split(";")]


def cp_range(s):
    a, _, b = s.partition("..")
    return range(int(a, 16), int(b or a, 16) + 1)


def version():
    text = open(os.path.join(UCD, "ReadMe.txt"), encoding="utf-8").read()
    m = re.search(r"Version (\d+\.\d+\.\d+)", text) or re.search(r"/Public/(\d+\.\d+\.\d+)/", text)
    return m.group(1) if m else "unknown"


def main():
    gc = ["Cn"] * 0x110000
    ccc = {}
    decomp = {}   # cp -> (is_compat, [cps])
    first = None
    for f in read("UnicodeData.txt"):
        cp = int(f[0], 16)
        if f[1].endswith("First>"):
            first = cp
            continue
        for c in (range(first, cp + 1) if f[1].endswith("Last>") else [cp]):
            gc[c] = f[2]
        if int(f[3]):
            ccc[cp] = int(f[3])
        if f[5]:
            parts = f[5].split()
            compat = parts[0].startswith("<")
            decomp[cp] = (compat, [int(x, 16) for x in (parts[1:] if compat else parts)])

    def prop(fname, name):
        s = set()
        for f in read(fname):
            if f[1] == name:
                s.update(cp_range(f[0]))
        return s

    white = prop("PropList.txt", "White_Space")
    alpha = prop("DerivedCoreProperties.txt", "Alphabetic")
    excl = prop("DerivedNormalizationProps.txt", "Full_Composition_Exclusion")
    fold = {}
    for f in read("CaseFolding.txt"):
        if f[1] in ("C", "S"):
            fold[int(f[0], 16)] = int(f[2], 16)

    # Above LIMIT: only tags (Cf), variation selectors (Mn) and private use (Co) are assigned.
    def high_cat(c):
        if c == 0xE0001 or 0xE0020 <= c <= 0xE007F: return "Cf"
        if 0xE0100 <= c <= 0xE01EF: return "Mn"
        if 0xF0000 <= c <= 0xFFFFD or 0x100000 <= c <= 0x10FFFD: return "Co"
        return "Cn"
    for c in range(LIMIT, 0x110000):
        assert gc[c] == high_cat(c), hex(c)

    # Two-stage general category: stage1[cp / BLOCK] -> block number, stage2 = blocks of BLOCK
    # categories, one char each ('a' + category index), so the table is one string literal.
    blocks, stage1 = {}, []
    for b in range(LIMIT // BLOCK):
        s = "".join(chr(ord("a") + CATS.index(gc[c])) for c in range(b * BLOCK, (b + 1) * BLOCK))
        stage1.append(blocks.setdefault(s, len(blocks)))
    stage2 = "".join(sorted(blocks, key=blocks.get))

    # \w as Oniguruma (Unicode mode) has it, found with the oracle (tools/unicode/make_regex_golden.py):
    # letters, marks, Nd, Pc, Nl, plus the other Alphabetic code points (circled / squared
    # Latin letters, So) and six Latin-1 No characters (superscripts 1-3, vulgar fractions).
    wordcat = lambda c: gc[c][0] in "LM" or gc[c] in ("Nd", "Pc", "Nl")
    word_extra = sorted(set(c for c in alpha if not wordcat(c)) | {0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE})

    def ranges(cps):
        out = []
        for c in sorted(cps):
            if out and out[-1][1] == c - 1: out[-1][1] = c
            else: out.append([c, c])
        return out

    # Full decompositions. Canonical: applied recursively (canonical mappings only). Compat:
    # recursively with both, kept only where it differs from the canonical one. Hangul is algorithmic.
    def full(c, compat):
        d = decomp.get(c)
        if d is None or (d[0] and not compat):
            return [c]
        return [y for x in d[1] for y in full(x, compat)]
    canon = {c: full(c, False) for c in decomp if not decomp[c][0]}
    compat = {}
    for c in decomp:
        k = full(c, True)
        if k != canon.get(c, [c]):
            compat[c] = k
    compose = sorted((d[1][0], d[1][1], c) for c, d in decomp.items()
                     if not d[0] and len(d[1]) == 2 and c not in excl)
    ccc_r = []
    for c in sorted(ccc):
        if ccc_r and ccc_r[-1][1] == c - 1 and ccc_r[-1][2] == ccc[c]: ccc_r[-1][1] = c
        else: ccc_r.append([c, c, ccc[c]])

    def table(entries, per_line):
        lines = []
        for i in range(0, len(entries), per_line):
            lines.append("    " + ", ".join(entries[i:i + per_line]) + ",")
        return "\n".join(lines)

    def pool_table(name, m):
        pool, idx = [], []
        for c in sorted(m):
            idx.append("{%d, %d, %d}" % (c, len(pool), len(m[c])))
            pool.extend(m[c])
        return (f"inline constexpr char32_t {name}_pool[] = {{\n{table([str(x) for x in pool], 16)}\n}};\n"
                f"inline constexpr decomposition {name}[] = {{\n{table(idx, 8)}\n}};\n")

    ver = version()
    o = []
    o.append(f"""// slm/text/unicode_tables.hpp - GENERATED by tools/unicode/gen_unicode_tables.py from the Unicode
// Character Database {ver} (Debian package unicode-data: UnicodeData.txt, CaseFolding.txt,
// DerivedNormalizationProps.txt, PropList.txt, DerivedCoreProperties.txt). Do not edit; rerun
// the script (tools/unicode/README.md). Used by slm/text/unicode.hpp, which documents the lookups.
#pragma once

#include <cstdint>

namespace slm::unicode::tables {{

inline constexpr char unicode_version[] = "{ver}";

// General category, two stages for code points below {LIMIT:#x}: gc_stage2[gc_stage1[cp / {BLOCK}] * {BLOCK} + cp % {BLOCK}]
// is 'a' + the category's index in slm::unicode::category. Above {LIMIT:#x}: E0001 and E0020..E007F
// are Cf, E0100..E01EF Mn, F0000..FFFFD and 100000..10FFFD Co, the rest Cn.
inline constexpr std::uint32_t gc_block = {BLOCK};
inline constexpr char32_t gc_limit = {LIMIT:#x};
inline constexpr std::uint16_t gc_stage1[{len(stage1)}] = {{
{table([str(x) for x in stage1], 32)}
}};
""")
    o.append("inline constexpr char gc_stage2[] =\n")
    for i in range(0, len(stage2), 120):
        o.append('    "' + stage2[i:i + 120] + '"\n')
    o.append(";\n\n")
    o.append("struct range { char32_t first, last; };\n")
    o.append("// White_Space (PropList.txt).\ninline constexpr range white_space[] = {\n" +
             table(["{%d, %d}" % tuple(r) for r in ranges(white)], 8) + "\n};\n")
    o.append("// Code points in \\w besides categories L*, M*, Nd, Nl, Pc (see the generator).\n"
             "inline constexpr range word_extra[] = {\n" +
             table(["{%d, %d}" % tuple(r) for r in ranges(word_extra)], 8) + "\n};\n\n")
    o.append("// Simple case folding (CaseFolding.txt statuses C and S), sorted by code point.\n"
             "struct fold_pair { char32_t from, to; };\ninline constexpr fold_pair simple_fold[] = {\n" +
             table(["{%d, %d}" % (a, b) for a, b in sorted(fold.items())], 8) + "\n};\n\n")
    o.append("// Canonical combining class, runs of equal non-zero class; everything else is 0.\n"
             "struct ccc_range { char32_t first, last; std::uint8_t ccc; };\ninline constexpr ccc_range combining_class[] = {\n" +
             table(["{%d, %d, %d}" % tuple(r) for r in ccc_r], 6) + "\n};\n\n")
    o.append("// Full decompositions (Hangul syllables excluded: algorithmic): code point, offset\n"
             "// into the pool, length. canonical_*: canonical mappings applied recursively.\n"
             "// compat_*: compatibility (NFKD) decomposition, only where it differs from the canonical.\n"
             "struct decomposition { char32_t cp; std::uint16_t offset; std::uint8_t length; };\n")
    o.append(pool_table("canonical", canon))
    o.append(pool_table("compat", compat))
    o.append("\n// Primary composites: (first, second) -> composite, sorted; excludes\n"
             "// Full_Composition_Exclusion. Hangul is algorithmic.\n"
             "struct composition { char32_t first, second, composite; };\ninline constexpr composition compositions[] = {\n" +
             table(["{%d, %d, %d}" % t for t in compose], 6) + "\n};\n\n")
    seconds = sorted(set(t[1] for t in compose if t[1] not in ccc))
    o.append("// Starters (class 0) that are the second half of some primary composite, sorted.\n"
             "inline constexpr char32_t composing_starters[] = {\n" + table([str(x) for x in seconds], 16) + "\n};\n\n")
    o.append("}  // namespace slm::unicode::tables\n")
    sys.stdout.write("".join(o))
    sys.stderr.write(f"blocks {len(blocks)} stage1 {len(stage1)} fold {len(fold)} ccc ranges {len(ccc_r)} "
                     f"canon {len(canon)} compat {len(compat)} compose {len(compose)} word_extra {len(ranges(word_extra))}\n")


if __name__ == "__main__":
    main()
