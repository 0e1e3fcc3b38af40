#!/usr/bin/env python3
"""Golden data for slm's regex engine and Unicode normalization (tests/test_regex.cpp,
tests/test_unicode.cpp), made by HF `tokenizers` itself: its Split pre-tokenizer runs
Oniguruma, its NFC/NFD/NFKC normalizers the unicode-normalization crate.

Run where `tokenizers` is installed (the device machine):
    python3 tools/unicode/make_regex_golden.py OUT.json
Records, for each pattern and each text, the byte offsets of the pieces that
Split(Regex(p), "isolated").pre_tokenize_str(text) returns (converted from the
character offsets it reports), as a list of piece lengths in bytes (the pieces tile
the text, so lengths are enough; empty pieces never occur). Also the code point ranges
that single-class patterns (\\s, \\d, \\w, \\p{L}, ...) match over a text holding
every scalar value, and normalizer outputs.
"""
import json, random, sys, unicodedata
import tokenizers
from tokenizers import Regex, pre_tokenizers, normalizers

PATTERNS = {
  "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
  "cl100k_tiktoken": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
  "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
  "o200k": r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
  "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
  "deepseek_v3_1": r"""\p{N}{1,3}""",
  "deepseek_v3_2": "[一-龥\u3040-ゟ゠-ヿ]+",
  "deepseek_v3_3": r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
  "cpp_split": r"""::|->\*?|<<=?|>>=?|\+\+|--|&&|\|\||[-+*/%&|^!=<>]=|\.\.\.|\.\*|[{}()\[\];,.?:~!%^&*+\-=/<>|#\\@`$'\"]| ?\p{L}[\p{L}\p{N}_]*| ?_[\p{L}\p{N}_]*|\p{N}+|\r?\n|[ \t]+""",
  "nam56r": r"""<=>|<<=|>>=|->\*|\.\*|::|->|==|!=|<=|>=|&&|\|\||<<|>>|\+\+|--|\+=|-=|\*=|/=|%=|&=|\|=|\^=|\.\.\.|##|//|/\*|\*/|@@|---|\+\+\+|\n\n|\n|[{}()\[\]<>;:,.+\-*/%&|^~!?=#@$_"'`]""",
  "digits_each": r"""\p{N}""",
  "digits_ascii3": r"""[0-9]{1,3}""",
  "t_icase": r"""(?i)ss|(?i:k+)|(?i:ß)|(?i:é+)|(?i:σ+)""",
  "t_icase_scoped": r"""a(?i)bC|X(?i:y)Z|(?i:[a-c]+)""",
  "t_possessive": r"""a++b|a*+|\d?+\d|\w{2,3}+x|\s++(?!\S)""",
  "t_atomic_lazy": r"""(?>a+)b|".*?"|'.+?'|\d+?x|\w+??|(a|ab)(c|bcd)(d*)""",
  "t_look": r"""\w+(?=\s)|\p{P}(?!\p{P})|(?!\d)\w{2}""",
  "t_anchors": r"""^\s*\w+|\w+$|\A.|.\z|^$""",
  "t_dot_neg": r""".{1,4}|[^\w\s]+|\S+|\D{3}|\W""",
  "t_props": r"""\p{Lu}\p{Ll}+|\p{Nd}+|\p{Lo}+|\p{Mn}+|\p{Lt}|\p{Lm}|\P{L}\P{N}|[\p{Sm}\p{Sc}]|\p{Zs}""",
  "t_escapes": r"""[\x{3040}-\x{309F}]+|\u3000+|\x41+|[\t\v\f]+|[\-\]\\]+|[^\x00-\x7F]{3}""",
  "t_counted": r"""\d{2}|\p{L}{3,}|x{0,2}y|\s{2,3}""",
}

# Patterns made of one class: their matches over ALL_CP are the class's ranges.
SWEEPS = {
  "s": r"\s+", "d": r"\d+", "w": r"\w+", "dot": r".+", "L": r"\p{L}+", "Lu": r"\p{Lu}+",
  "Ll": r"\p{Ll}+", "Lt": r"\p{Lt}+", "Lm": r"\p{Lm}+", "Lo": r"\p{Lo}+", "M": r"\p{M}+",
  "Mn": r"\p{Mn}+", "Nd": r"\p{Nd}+", "N": r"\p{N}+", "P": r"\p{P}+", "S": r"\p{S}+",
  "Z": r"\p{Z}+", "Cn": r"\p{Cn}+", "Co": r"\p{Co}+", "Cc": r"\p{Cc}+", "Cf": r"\p{Cf}+",
  "S_neg": r"\S+", "D_neg": r"\D+", "W_neg": r"\W+", "notL_cls": r"[^\s\p{L}\p{N}]+",
}
# Which code points (?i) lets each letter of the contractions match.
for _c in "stremlvdkßσ":
    SWEEPS["fold_" + _c] = "(?i:" + _c + ")"

CPP = r'''// slm/example.hpp - a sample of C++ for the tokenizer tests.
#pragma once
#include <vector>
namespace slm::detail {
template <class T, std::size_t N = 16>
struct ring_buffer final : base<T> {
  static constexpr auto kMask = N - 1;  // N is a power of 2
  T data_[N]{};
  std::size_t head_ = 0, tail_ = 0;
  auto operator<=>(const ring_buffer&) const = default;
  T* begin() noexcept { return &data_[head_ & kMask]; }
  void push(T&& v) { data_[tail_++ & kMask] = std::move(v); if (tail_ - head_ > N) ++head_; }
  bool ok() const { return a->b && c->*d || !e; }
  int shift(int x) { x <<= 2; x >>= 1; return x << 3 | x >> 1 ^ ~x % 7; }
};
/* block comment: 'quoted' "string" with \"escapes\" and 0x1F, 1'000'000, 3.14e-10f */
#define CAT(a, b) a##b
auto s = u8"héllo wörld"; auto r = R"(raw\n)"; char c = '\\'; x += 1; y -= 2; z *= 3; w /= 4; q %= 5; m &= 6; n |= 7; o ^= 8;
for (int i = 0; i < 10; ++i) { v[i]--; }   // trailing spaces   
if (p != nullptr && *p == 42) return ...;
}  // namespace slm::detail

'''

TEXTS = {
  "cpp": CPP,
  "cpp_crlf": CPP.replace("\n", "\r\n"),
  "contractions": "I'm sure he'll say it's 'theirs'. We'd've DON'T WON'T I'LL 'S 'ſ 'K 'T 'RE 'VE 'M 'LL 'D 'ﬆ '\u212a 'x ''s'",
  "whitespace": "a  b\t\tc \t d\r\ne\n\n\nf \n g\u00a0h\u00a0\u00a0i\u2028j\u2029k\u0085l\u3000m\u200bn\u1680o\u2000\u200a\u202f\u205fp \u000b\u000cq    \n    r\u180es\ufeff t   ",
  "unicode_ids": "int größe = 1; auto 变量 = 2; double π_value = 3.14; Ωmega δx = résumé; naïve_Ü; ǅungla ǈ ʰʲ ᵃ ﬁnal ＡＢＣ ａｂｃ",
  "emoji": "ok 👍🏽 fine 👨‍👩‍👧 🇩🇪 ❤️ ☃ ✓ → ≠ ∞ ±5 €10 £3 ¥ © ® ™ ° µ ¼ ² ³",
  "combining": "e\u0301 a\u0323\u0302 o\u0308\u0304 \u0915\u094d\u0937 \u0e01\u0e34 n\u0303o Z\u0351\u0352\u0353 q\u0307\u0323 \u1100\u1161\u11a8",
  "hangul_cjk": "한국어 텍스트와 日本語のテキスト、カタカナ ﾊﾝｶｸ 中文文本。龥龦 ぁゟ゠ヿ 〇〡〩",
  "digits": "0123456789 ٠١٢٣٤٥٦٧٨٩ ۰۱۲ ०१२३ ０１２３４５ ⅠⅡⅢ ½ ① ²³ 𝟎𝟏 12345678 1,234.5e-6 x86_64 0xFF",
  "icase": "SS ss ß ẞ Ss sS K k \u212a kK\u212a É é ÉÉé Σ σ ς ΣΑΣ x aBC abc aBc XyZ XYZ xYz ABC aBcAbC Ǆ ǅ ǆ",
  "lookish": "abc  def\tghi!!? jk.. \"quoted string\" 'single' 'x' 123x 12x aab aaab abcd abcdx \n\n  x",
  "anchors": "first line\nsecond  \n\n  third\r\nlast",
  "misc": "\t\tif (x) {\n\t\t\treturn;\n\t\t}\n@@ -1,4 +1,5 @@\n--- a/b\n+++ c/d\n// comment ## x .* ->* <=> <<= >>= ... :: -> ;;\n$ _ ` ~ ^ | & % ?",
}

def random_mix(seed, n):
    rnd = random.Random(seed)
    atoms = ["int", " x", "  ", "\t", "\n", "\r\n", "\n\n", "::", "->", "<<=", "'s", "'LL", "'ſ", "é", "e\u0301",
             "größe", "变量", "한국", "ｶﾀ", "カタカナ", "👍🏽", "🇩🇪", "٣٤", "０１", "123", "4567", "½", "\u00a0", "\u2028",
             "\u0085", "\u3000", "\u200b", "\u212a", "ǅ", "ß", "(", ")", "{", "}", ";", "/*", "*/", "//", "\"", "'", "_id",
             "x_1", ".*", "...", "#", "##", "@@", "---", "+++", "$", "`", "\\", "=", "==", "!=", "&&", "||", "++", "?",
             " ", "   ", "a", "Z", "ΣΑΣ", "\u0915\u094d\u0937", "\ufeff", "\u000b", "\u000c", "\u1680", "\u0301"]
    out = []
    while sum(map(len, out)) < n:
        out.append(rnd.choice(atoms))
    return "".join(out)

TEXTS["mix1"] = random_mix(1, 5000)
TEXTS["mix2"] = random_mix(2, 5000)

def split_lengths(pattern, text):
    pre = pre_tokenizers.Split(Regex(pattern), "isolated")
    pieces = pre.pre_tokenize_str(text)
    lens, pos = [], 0
    for piece, (a, b) in pieces:
        assert a == pos, (pattern, a, pos)
        assert piece == text[a:b]
        lens.append(len(text[a:b].encode("utf-8")))
        pos = b
    assert pos == len(text)
    return lens

def main():
    out_path = sys.argv[1]
    doc = {
        "note": "made by tools/unicode/make_regex_golden.py with HF tokenizers (Split pre-tokenizer = Oniguruma; "
                "NFC/NFD/NFKC normalizers). splits[pattern][text] = byte lengths of the isolated pieces in order.",
        "tokenizers_version": tokenizers.__version__,
        "python_unicodedata_version": unicodedata.unidata_version,
        "patterns": PATTERNS, "texts": TEXTS, "splits": {}, "sweeps": {}, "normalize": [],
    }
    for pn, p in PATTERNS.items():
        doc["splits"][pn] = {tn: split_lengths(p, t) for tn, t in TEXTS.items()}
    # Every scalar value in order (no surrogates): offsets map back to code points.
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    all_text = "".join(map(chr, cps))
    for name, p in SWEEPS.items():
        # "removed" returns the gaps between matches; the matches are the rest.
        gaps = pre_tokenizers.Split(Regex(p), "removed").pre_tokenize_str(all_text)
        rngs, pos = [], 0
        for piece, (a, b) in gaps:
            if a > pos: rngs.append((cps[pos], cps[a - 1]))
            pos = b
        if pos < len(cps): rngs.append((cps[pos], cps[-1]))
        doc["sweeps"][name] = [list(r) for r in rngs]
    norm_texts = ["e\u0301", "\u00e9", "a\u0323\u0302 a\u0302\u0323 \u1ead", "\u212b \u2126 \u00c5 A\u030a \u212a",
                  "\u0958 \u0915\u093c \u2adc \u0344 \u0f73", "\u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8 \ud55c\uad6d\uc5b4",
                  "\ufb01 \u2460 \u00b2 \uff21\uff41 \u3300 \u1e9b\u0323 \u00bd \u2163 \u00a0x \u2028 \u03d3 \u0385",
                  "o\u0308\u0304 \u01d5 U\u0308\u0304 \u0041\u0301\u0327 \u1e08", "q\u0307\u0323 q\u0323\u0307 \u0226\u0304",
                  "\u0b47\u0b3e \u0b4b \u09c7\u09be \u0dd9\u0dcf\u0dca", "\ud7a3\u11c2 \u1112\u1175\u11c2 \u110b\u1173",
                  "\u0041\u0300\u0301\u0302\u0303\u0304\u0305\u0306", "plain ascii", "\u00e0\u00e8\u00ec\u00f2\u00f9 \u00c0",
                  "\u1f80\u0345 \u1fb3 \u03b1\u0313\u0345\u0300", "\u05d0\u05b7\u05bc \ufb2e \ufb1d", "\u2000\u2001 \u037e \u0387",
                  "\U0001d15e \U0001d160 \U0002f800 \u2f00 \u3131 \uffa1"]
    for t in norm_texts:
        doc["normalize"].append({"in": t, "nfc": normalizers.NFC().normalize_str(t), "nfd": normalizers.NFD().normalize_str(t),
                                 "nfkc": normalizers.NFKC().normalize_str(t), "nfkd": normalizers.NFKD().normalize_str(t)})
    s = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    open(out_path, "w", encoding="utf-8").write(s)
    print("bytes", len(s.encode()), "tokenizers", tokenizers.__version__)

if __name__ == "__main__":
    main()
