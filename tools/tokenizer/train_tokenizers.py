#!/usr/bin/env python3
"""Train three small BPE tokenizers with HF `tokenizers` (the oracle) and write test cases.

    python3 tools/tokenizer/train_tokenizers.py --corpus corpus_small.tar.gz \
        --out-dir tests/data/tokenizers

writes <out-dir>/{cpp_bytelevel,nam56r_cpp,nam56r_ws}/{tokenizer.json,cases.json}
(tokenizer.json is `Tokenizer.to_str()`, compact, as HF writes it).  The corpus is
the tarball of tools/tokenizer/make_corpus.py: train/ files train, heldout/ files
feed the test texts.  cases.json has the layout of the goldens in
tests/data/tokenizers/golden/ plus the optional keys "name", "invalid_utf8" and
"hf_decoded_b64"; see tools/tokenizer/README.md.

--texts-only prints the test texts and needs no `tokenizers` (for checking here).
"""
import argparse
import base64
import codecs
import io
import json
import os
import random
import sys
import tarfile
import time
import traceback
import unicodedata

# GPT-4o / o200k_base split (tiktoken's pat_str, the alternatives joined by '|')
O200K = '|'.join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# NAM56R spec §3: operators isolated longest first, the newline tokens, single punctuation
NAM56R_OPS = ['<=>', '<<=', '>>=', '->*', '.*', '::', '->', '==', '!=', '<=', '>=', '&&', '||', '<<', '>>',
              '++', '--', '+=', '-=', '*=', '/=', '%=', '&=', '|=', '^=', '...', '##', '//', '/*', '*/',
              '@@', '---', '+++']
NAM56R_PUNCT = '{}()[]<>;:,.+-*/%&|^~!?=#@$_\\"\'`'


def rx_escape(s):
    return ''.join('\\' + c if c in '\\^$.|?*+()[]{}-/' else c for c in s)


def nam56r_regex(keep_whitespace):
    ops = sorted(NAM56R_OPS, key=len, reverse=True)           # stable: longest first
    alts = [rx_escape(o) for o in ops] + [r'\n\n', r'\n']
    if keep_whitespace:
        # round-trip variant: runs of blanks and identifier/number runs are pieces of their own
        alts += [r'[ \t]+', r'[\p{L}\p{M}\p{N}]+']
    alts.append('[' + ''.join('\\' + c if c in '\\[]^-' else c for c in NAM56R_PUNCT) + ']')
    return '|'.join(alts)


NAM56R_SPECIALS = ['<PAD>', '<UNK>', '<BOS>', '<EOS>', '<FIM_PREFIX>', '<FIM_MIDDLE>', '<FIM_SUFFIX>',
                   '<CODE_START>', '<CODE_END>', '<THINK_START>', '<THINK_END>', '<QUERY_TOOL>',
                   # 12..18 are not named by the spec (it lists "... <TOOL_RESULT>=19"): our names
                   '<TOOL_CALL>', '<TOOL_ARGS>', '<FILE_SEP>', '<REPO_NAME>', '<FILE_NAME>',
                   '<DIFF_START>', '<DIFF_END>', '<TOOL_RESULT>']
OPENAI_SPECIALS = ['<|endoftext|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|fim_pad|>']
RESUME_NFD = unicodedata.normalize('NFD', 'résumé')         # added token, normalized=True
SEP_TOKEN = '<|sep|>'                                         # added token, lstrip=rstrip=True


def bytes_to_unicode():
    """GPT-2's byte -> printable char map (the ByteLevel pre-tokenizer's)."""
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), ord('ÿ') + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE2CHAR = bytes_to_unicode()
PUA_BASE = 0xF700
codecs.register_error('slm_pua_bytes', lambda e: (''.join(chr(PUA_BASE + b) for b in e.object[e.start:e.end]), e.end))


# ----------------------------------------------------------------------------- corpus
def load_corpus(path):
    files = []
    with tarfile.open(path, 'r:gz') as tar:
        manifest = None
        for m in tar.getmembers():
            if not m.isfile():
                continue
            data = tar.extractfile(m).read()
            if m.name == 'corpus/manifest.json':
                manifest = json.loads(data)
                continue
            _, split, cat, _ = m.name.split('/', 3)
            files.append((m.name, split, cat, data.decode('utf-8')))
    files.sort()
    return manifest, files


def middle_lines(text, lo, hi, frac=3):
    """A run of whole lines from the middle of text, lo..hi characters long (or the whole text)."""
    lines = text.splitlines(keepends=True)
    start = len(lines) // frac
    out = ''
    for ln in lines[start:]:
        if len(out) + len(ln) > hi and len(out) >= lo:
            break
        out += ln
        if len(out) >= hi:
            break
    if len(out) < lo:
        out = text[:hi]
    return out[:hi]


def build_texts(files):
    """[(name, text)]: the same texts for every tokenizer."""
    T = []
    held = [f for f in files if f[1] == 'heldout']
    per_cat = {'cpp': 8, 'cmake': 5, 'shell': 5}
    for cat, n in per_cat.items():
        fs = [f for f in held if f[2] == cat and len(f[3]) >= 300]
        step = max(1, len(fs) // n)
        for i, f in enumerate(fs[::step][:n]):
            T.append((f'heldout_{cat}_{i}:{os.path.basename(f[0])}', middle_lines(f[3], 250, 700)))
    for cat in ('cpp', 'cmake', 'shell'):
        fs = sorted((f for f in held if f[2] == cat), key=lambda f: (-len(f[3]), f[0]))
        if fs:
            T.append((f'chunk_{cat}:{os.path.basename(fs[0][0])}', middle_lines(fs[0][3], 2500, 3800, frac=2)))

    T += [
        ('empty', ''),
        ('single_space', ' '),
        ('single_newline', '\n'),
        ('main_crlf', 'int main() {\n\treturn 0;\r\n}\r\n'),
        ('spaces_120', ' ' * 120 + 'x'),
        ('spaces_300_trailing', 'int a;' + ' ' * 300),
        ('tabs', '\t\t\tfoo\t\tbar\t \t baz\t'),
        ('indent_mixed', 'void f() {\n    if (x) {\n\t\treturn;\n    }\n  \n}\n'),
        ('crlf_blank_lines', 'a\r\n\r\n\r\nb\r\n  \r\n'),
        ('cr_alone', 'a\rb\r\rc\n\r\nd\r'),
        ('newline_runs', '\n\n\n\n\nx\n\n \n\t\n'),
        ('operators', 'a<=>b; x<<=1; y>>=2; p->*m; o.*m; a::b; p->q; ++i--; a&&b||c; x...; ## // /* */ @@ --- +++ -->'),
        ('template', 'std::map<std::string, std::vector<int>> m; auto x = static_cast<unsigned long long>(y);'),
        ('string_escapes', 'const char* s = "tab\\there \\"quoted\\" \\\\ \\n"; char c = \'\\x41\';'),
        ('raw_string', 'auto r = R"delim(raw \\n "string")delim";'),
        ('preprocessor', '#include <vector>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#if defined(__GNUC__) && __GNUC__ >= 12\n#pragma once\n#endif\n'),
        ('contractions', "// don't won't it's I'M WE'LL they've you'd 's 'T 'Re"),
        ('latin_accents', 'int größe = 1; // Größe in Bytes, déjà vu, naïve, Ærø, Øre, ñandú'),
        ('cyrillic_greek', 'double π = 3.14159; // число пи; Ελληνικά: αβγδε ΑΒΓ; Привет, мир!'),
        ('cjk', 'auto λ = [](int x) { return x; }; // 函数 関数 함수 テスト 测试代码'),
        ('nfc_combining', unicodedata.normalize('NFC', 'café résumé naïve Åström ḉ 한국어')),
        ('nfd_combining', unicodedata.normalize('NFD', 'café résumé naïve Åström ḉ 한국어')),
        ('marks_out_of_order', 'a\u0301\u0323 e\u0323\u0302 x\u0301\u0301 \u0301leading'),
        ('emoji', '// 👍 👍🏽 🧑\u200d💻 👨\u200d👩\u200d👧\u200d👦 🇩🇪🇯🇵 ❤️ ✔︎ 🏳️\u200d🌈'),
        ('odd_spaces', 'int\u00a0x;\u2028y\u3000=\ufeff1;\u2029z\u2003=\u200b2;'),
        ('bom_start', '\ufeff#include <cstdio>\n'),
        ('numbers_cpp', "1'000'000 0x1Fu 0b1010'1010 3.14e-10 1e+9f .5 0777ULL 123456789012345 0x1.8p3 42z"),
        ('numbers_unicode', 'arabic-indic ٠١٢٣٤٥٦٧٨٩ fullwidth １２３４５ devanagari १२३ superscript x² ³ roman Ⅻ ½'),
        ('special_openai_all', ''.join(OPENAI_SPECIALS)),
        ('special_adjacent_text', '<|fim_prefix|>int f() {<|fim_suffix|>}\n<|fim_middle|>return 1;<|endoftext|>'),
        ('special_twice', '<|endoftext|><|endoftext|> <|fim_pad|><|fim_pad|>'),
        ('special_partial', '<|fim_pre <|endoftext <|fim_prefix| <<|endoftext|>> |endoftext|> <|EndOfText|>'),
        ('special_nam56r_fim', '<BOS><FIM_PREFIX>int f() {<FIM_SUFFIX>}\n<FIM_MIDDLE>return 1;<EOS>'),
        ('special_nam56r_twice', '<EOS><EOS> <PAD><PAD><PAD> <THINK_START>hmm<THINK_END>'),
        ('special_nam56r_partial', '<FIM_PRE <BOS <EOS< <eos> < BOS> <CODE_START >'),
        ('added_resume_nfc', 'struct résumé_t { int résumé; }; // résumé'),
        ('added_resume_nfd', unicodedata.normalize('NFD', 'struct résumé_t { int résumé; }; // résumé')),
        ('added_sep_lstrip_rstrip', 'a  <|sep|>  b\tx\t<|sep|>\ny<|sep|>z <|sep|><|sep|> '),
    ]
    for s in OPENAI_SPECIALS:
        T.append((f'special_alone:{s}', s))
    for s in NAM56R_SPECIALS:
        T.append((f'special_alone:{s}', s))
    rng = random.Random(56)
    alnum = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_'
    T.append(('long_identifier', 'int ' + 'k' + ''.join(rng.choice(alnum) for _ in range(2047)) + ' = 0;'))
    T.append(('long_repeated', 'x' * 1500))
    return T


INVALID = [
    ('lone_continuation', b'int x = 1; \x80 // lone continuation byte'),
    ('lone_ff', b'\xff'),
    ('lone_fe_run', b'a\xfe\xfe\xffb'),
    ('truncated_3byte', b"char c = '\xe2\x82'; // truncated euro sign"),
    ('truncated_4byte_at_end', b'auto s = "\xf0\x9f\x98'),
    ('overlong_slash', b'path = "\xc0\xaf"; // overlong /'),
    ('surrogate', b'// \xed\xa0\x80 surrogate half \xed\xbf\xbf'),
    ('above_max', b'\xf4\x90\x80\x80 and \xf8\x88\x80\x80\x80'),
    ('latin1_in_cpp', b'std::string s = "caf\xe9"; // Latin-1 \xe9\xe8 na\xefve\n'),
    ('continuation_run', b'\x80\x80\x80\x80x\x80'),
    ('valid_and_invalid', b'x\xe2\x82\xacy\xfe \xe2\x82\xac\xe2\x82'),
    ('barrier_before_mark', b'e\x80\xcc\x81 e\xcc\x81 cafe\xff\xcc\x81'),
    ('invalid_in_spaces', b'    \x80    \t\xff\r\n\xc3'),
    ('invalid_next_to_digits', b'123\x80456 0x1F\xffu 3.14\xc0e-10'),
]


# ----------------------------------------------------------------------------- tokenizers
def make_tokenizers(tk):
    from tokenizers import Tokenizer, AddedToken, Regex, models, pre_tokenizers, decoders, normalizers, trainers
    out = {}

    # a. cpp_bytelevel
    split = pre_tokenizers.Split(Regex(O200K), behavior='isolated', invert=False)
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=len(OPENAI_SPECIALS) + 256 + 3000, min_frequency=2,
                             special_tokens=OPENAI_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    out['cpp_bytelevel'] = dict(tok=t, trainer=tr, split=split, byte_level=True,
                                added=[AddedToken(RESUME_NFD, single_word=False, lstrip=False, rstrip=False, normalized=True, special=False),
                                       AddedToken(SEP_TOKEN, single_word=False, lstrip=True, rstrip=True, normalized=False, special=False)])

    # b. nam56r_cpp (round-trip variant)
    split = pre_tokenizers.Split(Regex(nam56r_regex(True)), behavior='isolated', invert=False)
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=4300, min_frequency=2, special_tokens=NAM56R_SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    out['nam56r_cpp'] = dict(tok=t, trainer=tr, split=split, byte_level=True, added=[])

    # c. nam56r_ws (the spec's whitespace-discarding variant)
    split = pre_tokenizers.Split(Regex(nam56r_regex(False)), behavior='isolated', invert=False)
    t = Tokenizer(models.BPE(unk_token='<UNK>'))
    t.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.WhitespaceSplit()])
    alphabet = {c for _, _, _, text in tk for c in text if not c.isspace()}
    tr = trainers.BpeTrainer(vocab_size=len(NAM56R_SPECIALS) + len(alphabet) + 2000, min_frequency=2,
                             special_tokens=NAM56R_SPECIALS, show_progress=False)
    out['nam56r_ws'] = dict(tok=t, trainer=tr, split=split, byte_level=False, added=[])
    return out


def manual_ids(tok, split, raw):
    """The defined semantics for raw bytes: every invalid byte b acts as one private-use char
    U+F700+b through normalizer and pre-tokenizer, then turns back into its own raw byte."""
    s = raw.decode('utf-8', 'slm_pua_bytes')
    if tok.normalizer is not None:
        s = tok.normalizer.normalize_str(s)
    ids = []
    for piece, _ in split.pre_tokenize_str(s):
        b = bytearray()
        for ch in piece:
            o = ord(ch)
            if PUA_BASE <= o <= PUA_BASE + 0xFF:
                b.append(o - PUA_BASE)
            else:
                b += ch.encode('utf-8')
        ids += [t.id for t in tok.model.tokenize(''.join(BYTE2CHAR[x] for x in b))]
    return ids


def b64(b):
    return base64.b64encode(b).decode('ascii')


def write_cases(path, header, cases):
    head = json.dumps(header, ensure_ascii=False, separators=(', ', ': '))[:-1]
    body = ',\n'.join(json.dumps(c, ensure_ascii=True, separators=(',', ':')) for c in cases)
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write(head + ', "cases": [\n' + body + '\n]}\n')


def run(args):
    import tokenizers
    from tokenizers import Tokenizer
    hf = f'HF tokenizers {tokenizers.__version__}'
    manifest, files = load_corpus(args.corpus)
    train = [f for f in files if f[1] == 'train']
    texts = build_texts(files)
    print(f'{hf}; corpus: {len(train)} train files ({sum(len(f[3]) for f in train) / 1e6:.2f} M chars), '
          f'{len(texts)} test texts, {sum(len(t[1].encode()) for t in texts)} bytes', flush=True)
    toks = make_tokenizers(train)
    results = {}
    for name, spec in toks.items():
        t0 = time.time()
        try:
            tok = spec['tok']
            tok.train_from_iterator((f[3] for f in train), trainer=spec['trainer'], length=len(train))
            if spec['added']:
                tok.add_tokens(spec['added'])
            js = json.loads(tok.to_str())
            if name == 'nam56r_ws' and js['model'].get('unk_token') != '<UNK>':
                print(f'{name}: trainer dropped unk_token ({js["model"].get("unk_token")!r}); restoring', flush=True)
                js['model']['unk_token'] = '<UNK>'
                tok = Tokenizer.from_str(json.dumps(js))
            for i, s in enumerate(NAM56R_SPECIALS if name.startswith('nam56r') else OPENAI_SPECIALS):
                assert tok.token_to_id(s) == i, (name, s, tok.token_to_id(s))
            spec['tok'] = tok
            results[name] = spec
            print(f'{name}: trained in {time.time() - t0:.1f} s, vocab {tok.get_vocab_size(True)} '
                  f'(model {tok.get_vocab_size(False)}, merges {len(js["model"]["merges"])})', flush=True)
        except Exception:
            traceback.print_exc()

    budget = args.budget_kb * 1024
    dropped = []
    while True:
        total = 0
        for name, spec in results.items():
            spec['cases'] = make_cases(name, spec, texts)
            spec['json'] = spec['tok'].to_str()
            total += len(spec['json'].encode()) + spec['cases_bytes']
        if total <= budget:
            break
        big = max((t for t in texts if t[0].startswith(('chunk_', 'heldout_'))), key=lambda t: len(t[1]))
        texts.remove(big)
        dropped.append(big[0])
        print(f'over budget ({total} > {budget}): dropping text {big[0]}', flush=True)

    for name, spec in results.items():
        tok = spec['tok']
        d = os.path.join(args.out_dir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, 'tokenizer.json'), 'w', encoding='utf-8') as fh:
            fh.write(spec['json'])
        header = {'oracle': hf, 'kind': name, 'vocab_size': tok.get_vocab_size(True),
                  'generator': 'tools/tokenizer/train_tokenizers.py',
                  'corpus': {k: manifest.get(k) for k in ('created_by', 'created_at', 'totals')},
                  'encode': 'tok.encode(text, add_special_tokens=False).ids',
                  'decode': 'tok.decode(ids, skip_special_tokens=False)'}
        if spec['byte_level']:
            header['invalid_utf8_semantics'] = (
                'cases with "invalid_utf8": true hold raw bytes in text_b64; every invalid byte b acts as one '
                'private-use character U+F700+b (category Co) through normalizer and pre-tokenizer, and is '
                'byte b again for the byte-level map and BPE; decoded_b64 = the raw bytes; hf_decoded_b64 = '
                'what HF decode gives for those ids (lossy UTF-8).')
        write_cases(os.path.join(d, 'cases.json'), header, spec['cases'])
        # reload check: the written file reproduces every id
        tok2 = Tokenizer.from_file(os.path.join(d, 'tokenizer.json'))
        bad = [c['name'] for c in spec['cases'] if not c.get('invalid_utf8') and
               tok2.encode(base64.b64decode(c['text_b64']).decode('utf-8'), add_special_tokens=False).ids != c['ids']]
        print(f'{name}: reloaded tokenizer.json reproduces {len(spec["cases"]) - len(bad)} cases; differs on {bad}', flush=True)
        sz = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f'{name}: wrote {d} ({sz} bytes), {len(spec["cases"])} cases, {spec["rt_fail"]} valid texts '
              f'without exact round trip: {spec["rt_names"][:12]}', flush=True)
        print(f'{name}: manual pipeline agrees with encode on {spec["manual_ok"]}/{spec["manual_n"]} '
              f'texts free of added tokens; disagreements: {spec["manual_bad"][:8]}', flush=True)
    if dropped:
        print('dropped for size:', dropped)
    report_behaviour(results)


def make_cases(name, spec, texts):
    tok, split = spec['tok'], spec['split']
    added = [s for s in OPENAI_SPECIALS + NAM56R_SPECIALS + [SEP_TOKEN, RESUME_NFD,
             unicodedata.normalize('NFC', RESUME_NFD)]]
    cases, rt_names = [], []
    manual_n = manual_ok = 0
    manual_bad = []
    for tname, text in texts:
        enc = tok.encode(text, add_special_tokens=False)
        dec = tok.decode(enc.ids, skip_special_tokens=False)
        cases.append({'name': tname, 'text_b64': b64(text.encode()), 'ids': enc.ids, 'decoded_b64': b64(dec.encode())})
        if dec != text:
            rt_names.append(tname)
        if spec['byte_level']:
            norm = tok.normalizer.normalize_str(text) if tok.normalizer is not None else text
            if not any(a in text or a in norm for a in added):
                manual_n += 1
                m = manual_ids(tok, split, text.encode())
                if m == enc.ids:
                    manual_ok += 1
                else:
                    manual_bad.append(tname)
    if spec['byte_level']:
        for tname, raw in INVALID:
            ids = manual_ids(tok, split, raw)
            hf_dec = tok.decode(ids, skip_special_tokens=False)
            cases.append({'name': 'invalid_utf8:' + tname, 'invalid_utf8': True, 'text_b64': b64(raw), 'ids': ids,
                          'decoded_b64': b64(raw), 'hf_decoded_b64': b64(hf_dec.encode())})
    spec.update(rt_fail=len(rt_names), rt_names=rt_names, manual_n=manual_n, manual_ok=manual_ok, manual_bad=manual_bad)
    spec['cases_bytes'] = sum(len(json.dumps(c, separators=(',', ':'))) + 2 for c in cases) + 1200
    return cases


def report_behaviour(results):
    """Print what HF does in the corners the C++ port must copy."""
    probes = ['résumé', RESUME_NFD, 'xrésumé_t', 'a  <|sep|>  b', '\n<|sep|>\n', 'x<|sep|>y',
              '<|endoftext|>', ' <|endoftext|> ', '<EOS>', 'a\n\nb\n', 'int  x', '\u00a0x\u3000y\ufeff',
              "1'000'000", '٠١٢', '１２３', 'e\u0301', '👨\u200d👩\u200d👧']
    for name, spec in results.items():
        tok = spec['tok']
        print(f'--- {name}: probes (text -> tokens -> decode)')
        for p in probes:
            enc = tok.encode(p, add_special_tokens=False)
            print(f'  {p!r:32} -> {enc.tokens} {enc.ids} -> {tok.decode(enc.ids, skip_special_tokens=False)!r}')
        sp = spec['split']
        print(f'  pre_tokenize_str("int  a=b;\\n\\n  c\\t") = {sp.pre_tokenize_str("int  a=b;" + chr(10) * 2 + "  c" + chr(9))}')
        print(f'  full pre_tokenizer: {tok.pre_tokenizer.pre_tokenize_str("int  a=b;" + chr(10) + "  c")}')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--corpus', required=True)
    ap.add_argument('--out-dir', default='tests/data/tokenizers')
    ap.add_argument('--budget-kb', type=int, default=880, help='all three directories together')
    ap.add_argument('--texts-only', action='store_true')
    args = ap.parse_args()
    if args.texts_only:
        _, files = load_corpus(args.corpus)
        texts = build_texts(files)
        for n, t in texts:
            print(f'{len(t.encode()):6d} {n}  {t[:60]!r}')
        print(len(texts), 'texts,', sum(len(t.encode()) for _, t in texts), 'bytes;', len(INVALID), 'invalid')
        print('nam56r_cpp regex:', nam56r_regex(True))
        print('nam56r_ws  regex:', nam56r_regex(False))
        return
    run(args)


if __name__ == '__main__':
    main()
