"""A Python lexer that reproduces the Stanford PTB tokenizer of CoreNLP 3.4.1 on caption text.

pycocoevalcap scores captions after running ``stanford-corenlp-3.4.1.jar``'s ``PTBTokenizer -preserveLines
-lowerCase`` over them. This module re-implements that lexer's behaviour in Python, written from its
documented rules and checked token for token against the jar (``benchmarks/tokenizer_agreement.py``).

How it works: like the JFlex scanner it imitates, :func:`lex` tries every rule at the current position and
takes the longest match (trailing context counts towards the length; ties go to the earlier rule). A rule's
action turns the matched text into zero or more tokens and may hand characters back to the input
(``pushback``): "cannot" gives "can" and then "not", an acronym before a sentence start gives "u.s." and then
".". The scanner runs on the original case (some rules are case-sensitive); tokens are lower-cased at the end.

Where it can still differ from the jar (``docs/tokenization.md``): a Greek capital sigma lower-cased at the
end of a word (Java chooses σ or ς by its own word-boundary rules) and, on a Python whose Unicode tables are
newer than 14.0, letters and digits assigned since (letters here, deleted by the jar, whose tables are Unicode
6.2; those up to 14.0 are listed below). Characters outside the Basic Multilingual Plane (emoji) are deleted,
as the jar does.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterator

try:  # the regex parser, used to find which characters can start each rule
    import re._parser as _parser  # type: ignore[import-not-found]
except ImportError:  # Python 3.10
    import sre_parse as _parser  # type: ignore[no-redef]

# ---------------------------------------------------------------------------------------------------------
# Character classes. The jar's [:letter:] / [:digit:] are Java's Character.isLetter / isDigit restricted to
# the Basic Multilingual Plane; here they come from unicodedata (see the module notes on Unicode versions).
# ---------------------------------------------------------------------------------------------------------

def _code_points(spec: str) -> frozenset[int]:
    """Code points of a space-separated list of hexadecimal code points and ``FIRST-LAST`` ranges."""
    points: set[int] = set()
    for item in spec.split():
        first, _, last = item.partition("-")
        points.update(range(int(first, 16), int(last or first, 16) + 1))
    return frozenset(points)


# Non-letters that the jar's word rule accepts inside words (mostly combining marks of Indic, Arabic, Hebrew
# and Thai scripts, and spacing modifiers), measured against the jar one character at a time ("ab?cd").
# The soft hyphen is accepted too and removed from the token.
_WORD_MARKS = _code_points(
    "00AD 02C2-02C5 02D2-02DF 02E5-02EB 02ED 02EF-036F 0375 0378-0379 0384-0385 03F6 0483-0487 055A-055F "
    "0591-05BD 05BF 05C1-05C2 05C4-05C5 05C7 0615-061A 064B-065E 0670 06D6-06E4 06E7-06ED 06FD-06FE 070F 0711 "
    "0730-074C 07A6-07B0 07EB-07F3 0900-0903 093C 093E-094E 0951-0955 0962-0963 0981-0983 09BC 09BE-09C4 "
    "09C7-09C8 09CB-09CD 09D7 09E2-09E3 0A01-0A03 0A3C 0A3E-0A4F 0A81-0A83 0ABC 0ABE-0ACF 0B82 0BBE-0BC2 "
    "0BC6-0BC8 0BCA-0BCD 0C01-0C03 0C3E-0C56 0D3E-0D44 0D46-0D48 0E31 0E34-0E3A 0E47-0E4E 0EB1 0EB4-0EBC "
    "0EC8-0ECD 1885-1886"
)

# BMP letters and digits of Python's Unicode tables (14.0 in Python 3.11) that the jar does not know (they were
# assigned after its Unicode 6.2 tables): the jar deletes them. Measured against the jar, one character at a time.
_UNKNOWN_TO_JAR = _code_points(
    "037F 0528-052F 0560 0588 05EF 0860-086A 0870-0887 0889-088E 08A1 08AD-08C9 0978 0980 09FC 0AF9 0C34 0C5A "
    "0C5D 0C80 0CDD 0D04 0D54-0D56 0D5F 0DE6-0DEF 0E86 0E89 0E8C 0E8E-0E93 0E98 0EA0 0EA8-0EA9 0EAC 13F5 "
    "13F8-13FD 16F1-16F8 170D 171F 1878 191D-191E 19B0-19C0 19C8-19C9 1B4C 1C80-1C88 1C90-1CBA 1CBD-1CBF "
    "1CF2-1CF3 1CFA 2C2F 2C5F 312E-312F 31BB-31BF 4DB6-4DBF 9FCD-9FFF A698-A69D A78F A794-A79F A7AB-A7CA "
    "A7D0-A7D1 A7D3 A7D5-A7D9 A7F2-A7F7 A8FD-A8FE A9E0-A9E4 A9E6-A9FE AA7E-AA7F AB30-AB5A AB5C-AB69 AB70-ABBF"
)


def _bmp_class(keep: Callable[[str], bool]) -> str:
    """The body of a regex character class holding every BMP character for which ``keep`` is true."""
    parts: list[str] = []
    start = None
    for code in range(0x10001):
        inside = code <= 0xFFFF and not 0xD800 <= code <= 0xDFFF and code not in _UNKNOWN_TO_JAR and keep(chr(code))
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            first, last = re.escape(chr(start)), re.escape(chr(code - 1))
            parts.append(first if start == code - 1 else f"{first}-{last}")
            start = None
    return "".join(parts)


@dataclass(frozen=True)
class _Classes:
    """Regex character-class bodies (without brackets) of the lexer."""

    letter: str  # [:letter:]
    word_letter: str  # letters and the marks accepted inside words
    digit: str  # [:digit:]
    upper: str  # [:uppercase:]


@functools.cache
def _classes() -> _Classes:
    def is_letter(ch: str) -> bool:
        return unicodedata.category(ch) in ("Lu", "Ll", "Lt", "Lm", "Lo")

    return _Classes(
        letter=_bmp_class(is_letter),
        word_letter=_bmp_class(lambda ch: is_letter(ch) or ord(ch) in _WORD_MARKS),
        digit=_bmp_class(lambda ch: unicodedata.category(ch) == "Nd") + "\u07c0-\u07c9",
        upper=_bmp_class(lambda ch: unicodedata.category(ch) == "Lu"),
    )


# ---------------------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------------------

Action = Callable[[str], list[str]]


@dataclass(frozen=True)
class _Rule:
    """``patterns`` match at a position; group ``t`` (when present) is the token text, the rest trailing context.

    ``action`` maps the token text to output tokens; ``pushback`` characters of the token text are returned
    to the input (given as a function of the token text).
    """

    name: str
    patterns: tuple[re.Pattern[str], ...]  # alternatives; the longest match among them counts
    action: Action
    pushback: Callable[[str], int] | None = None
    # emit the whole text although the pushback is given back (the jar's "U.S." then "."), if true for the text
    reduplicate: Callable[[str], bool] | None = None


def _keep(text: str) -> list[str]:
    return [text]


def _drop(text: str) -> list[str]:
    return []


def _const(token: str) -> Action:
    return lambda text: [token]


_NBSP = "\u00a0"
_LEFT_SINGLE = re.compile("[\u0091\u2018\u201b\u2039]")
_RIGHT_SINGLE = re.compile("[\u0092\u2019\u203a]")
_LEFT_DOUBLE = re.compile("[\u0093\u201c\u00ab]")
_RIGHT_DOUBLE = re.compile("[\u0094\u201d\u00bb]")


def _quotes(probably_left: bool) -> Action:
    """LaTeX-style quotes: ' -> ` or ', " -> `` or '' (by ``probably_left``); curly quotes by their direction."""

    def action(text: str) -> list[str]:
        if probably_left:
            text = re.sub("&apos;|'", "`", text)
            text = re.sub('"|&quot;', "``", text)
        else:
            text = re.sub("&apos;|'", "'", text)
            text = re.sub('"|&quot;', "''", text)
        text = _LEFT_SINGLE.sub("`", text)
        text = _RIGHT_SINGLE.sub("'", text)
        text = _LEFT_DOUBLE.sub("``", text)
        text = _RIGHT_DOUBLE.sub("''", text)
        return [text]

    return action


def _amp(text: str) -> list[str]:
    return [re.sub("(?ai:&amp;)", "&", text)]


def _nbsp(text: str) -> list[str]:
    return [text.replace(" ", _NBSP)]


def _parens(text: str) -> list[str]:
    return [text.replace("(", "-LRB-").replace(")", "-RRB-")]


def _phone(text: str) -> list[str]:
    return _parens(text.replace(" ", _NBSP))


_FRACTIONS = {"\u00bc": "1/4", "\u00bd": "1/2", "\u00be": "3/4", "\u2153": "1/3", "\u2154": "2/3"}
_CURRENCY = {"\u00a2": "cents", "\u00a3": "#", "\u0080": "$", "\u00a4": "$", "\u20a0": "$", "\u20ac": "$"}


def _soft_hyphens(text: str) -> list[str]:
    return [text.replace("\u00ad", "") or "-"]


def _fraction(text: str) -> list[str]:
    return ["".join(_FRACTIONS.get(ch, ch) for ch in text)]


def _currency(text: str) -> list[str]:
    return ["".join(_CURRENCY.get(ch, ch) for ch in text)]


def _dashes(text: str) -> list[str]:
    return ["--" if 3 <= len(text) <= 4 else text]


def _one(text: str) -> int:
    return 1


def _caseless(item: str) -> str:
    """``item`` with its literal parts case-insensitive and its ``[...]`` classes left as they are."""
    parts = re.split(r"(\[[^\]]*\])", item)
    return "".join(p if p.startswith("[") or not p else f"(?ai:{p})" for p in parts)


@functools.cache
def _rules() -> tuple[_Rule, ...]:
    c = _classes()
    letter = f"[{c.word_letter}]"
    plain_letter = f"[{c.letter}]"
    digit = f"[{c.digit}]"
    alnum = f"[{c.letter}{c.digit}]"
    upper = f"[{c.upper}]"
    space = "[ \t\u00a0\u2000-\u200a\u3000]"
    newline = "(?:\r\n|[\r\n\u2028\u2029\x0b\x0c\x85])"
    spacenl = f"(?:{space}|{newline})"
    name = r"[A-Za-z][A-Za-z0-9_:.\-]*"
    attribute = f"{name}(?:[ ]*=[ ]*(?:'[^']*'|\"[^\"]*\"|{name}))?"
    sgml = f"<(?:[!?][A-Za-z\\-][^>\\r\\n]*|{name}(?:[ ]+{attribute})*[ ]*/?|/{name})[ ]*>"
    apos = "(?:['\u0092\u2019]|&apos;)"
    aposetc = "(?:['`\u0092\u2019\u0091\u2018\u201b]|&apos;)"
    word = f"{letter}(?:{letter}|{digit})*(?:[.!?]{letter}(?:{letter}|{digit})*)*"
    num = f"(?:{digit}+(?:[.:,\u00ad\u066b\u066c]{digit}+)*|{digit}*(?:[.:,\u00ad\u066b\u066c]{digit}+)+)"
    number = f"[\\-+]?{num}"
    hyphen = "[-_\u058a\u2010\u2011]"
    acro = r"(?:[A-Za-z](?:\.[A-Za-z])+|(?ai:Canada|Sino|Korean|EU|Japan|non)-(?ai:U\.S)|(?ai:U\.S\.-(?:U\.K|U\.S\.S\.R)))"
    redaux = f"{apos}(?ai:[msd]|re|ve|ll)"
    sredaux = f"(?ai:n){aposetc}(?ai:t)"
    insentp = "[,;:\u3001]"

    def words(*items: str) -> str:
        """Alternatives matched as JFlex %caseless does: literal text ignores case, ``[...]`` classes do not."""
        return "(?:" + "|".join(_caseless(item) for item in items) + ")"

    abbrev1 = words(
        "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec",  # months
        "Mon", "Tue", "Tues", "Wed", "Thu", "Thurs", "Fri",  # days
        "Ala", "Ariz", "[A]z", "[A]rk", "Calif", "Colo", "Conn", "Ct", "Dak", "[D]el", "Fla", "Ga", "[I]ll", "Ind",
        "Kans?", "Ky", "[L]a", "[M]ass", "Md", "Mich", "Minn", "[M]iss", "Mo", "Mont", "Neb", "Nev", "Okla", "[O]re",
        "[P]a", "Penn", "Tenn", "[T]ex", "Va", "Vt", "[W]ash", "Wisc?", "Wyo",  # states
        "Inc", "Cos?", "Corp", "Pp?t[ye]s?", "Ltd", "Plc", "Rt", "Bancorp", "Bhd", "Assn", "Univ", "Intl", "Sys",
        "tel", "est", "ext", "sq", "Jr", "Bros", r"(?:Ed|Ph)\.D", "Esq", "etc", "al", "seq", "Bldg",
    ) + r"\."
    abbrev4 = words(
        # titles, then a few others
        "Mr", "Mrs", "Ms", "Mx", "[M]iss", "Drs?", "Profs?", "Sens?", "Reps?", "Attys?", "Lt", "Col", "Gen", "Messrs",
        "Govs?", "Adm", "Rev", "Maj", "Sgt", "Cpl", "Pvt", "Capt", "Ste?", "Ave", "Pres", "Lieut", "Rt", "Hon",
        "Brig", "Co?mdr", "Pfc", "Spc", "Supts?", "Det", "Mt", "Ft", "Adj", "Adv", "Asst", "Assoc", "Ens", "Insp",
        "Mlle", "Mme", "Msgr", "Sfc", "Sr",
        "vs", "[v]", "Alex", "Wm", "Jos", "Cie", r"a\.k\.a", "cf", "TREAS", "Ph", "Invt", "Elec", "Natl", "M[ft]g",
        "Dept", "Blvd", "Rd", "Ave",
    )
    abbrev4 = f"(?:{acro}|{abbrev4}|[A-Za-z])"
    sentence_starters = words(*(
        "[A]bout [A]ccording [A]dditionally [A]fter [A]n [A] [A]s [A]t [B]ut [E]arlier [H]e [H]er [H]ere [H]owever "
        "[I]f [I]n [I]t [L]ast [M]any [M]ore [M]r\\. [M]s\\. [N]ow [O]nce [O]ne [O]ther [O]ur [S]he [S]ince [S]o "
        "[S]ome [S]uch [T]hat [T]he [T]heir [T]hen [T]here [T]hese [T]hey [T]his [W]e [W]hen [W]hile [W]hat [Y]et [Y]ou"
    ).split())
    apoword = (
        f"{apos}(?ai:n){apos}?", f"[lLdDjJ]{apos}", f"(?ai:Dunkin){apos}", f"(?ai:somethin){apos}", f"(?ai:ol){apos}",
        f"{apos}(?ai:em)", f"[A-HJ-XZn]{aposetc}{plain_letter}{{2}}{plain_letter}*", f"{apos}[2-9]0(?ai:s)",
        f"{apos}(?ai:till?)", f"{plain_letter}+[aeiouyAEIOUY]{aposetc}[aeiouA-Z]{plain_letter}*", f"{apos}(?ai:cause)",
        "(?ai:cont'd\\.?|nor'easter|c'mon|e'er|s'mores|ev'ry|li'l|nat'l)", f"(?ai:o){aposetc}(?ai:o)",
    )
    quotes = (apos, "''", "[`\u2018\u2019\u201a\u201b\u201c\u201d\u0091\u0092\u0093\u0094\u201e\u201f\u2039\u203a\u00ab\u00bb]{1,2}")
    dblquot = '(?:"|&quot;)'
    misc = (
        "[+%&~^|\\\\\u00a6\u00a7\u00a8\u00a9\u00ac\u00ae\u00af\u00b0-\u00b3\u00b4-\u00ba\u00d7\u00f7\u0387\u05be"
        "\u05c0\u05c3\u05c6\u05f3\u05f4\u0600-\u0603\u0606-\u060a\u060c\u0614\u061b\u061e\u066a\u066d"
        "\u0703-\u070d\u07f6\u07f7\u07f8\u0964\u0965\u0e4f\u1fbd\u2016\u2017\u2020-\u2023\u2030-\u2038\u203b"
        "\u203e-\u2042\u2044\u207a-\u207f\u208a-\u208e\u2100-\u214f\u2190-\u21ff\u2200-\u2bff\u3012\u30fb"
        "\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]"
    )
    fullurl = "(?ai:https?)://[^ \t\n\f\r\"<>|(){}]+[^ \t\n\f\r\"<>|.!?(){},-]"
    likelyurl = (
        "(?:(?:(?ai:www)\\.(?:[^ \t\n\f\r\"<>|.!?(){},]+\\.)+[a-zA-Z]{2,4})|(?:(?:[^ \t\n\f\r\"`'<>|.!?(){},-_$]+\\.)+"
        "(?ai:com|net|org|edu)))(?:/[^ \t\n\f\r\"<>|()]+[^ \t\n\f\r\"<>|.!?(){},-])?"
    )
    email = (
        "(?:&lt;|<)?[a-zA-Z0-9][^ \t\n\f\r\"<>|()\u00a0{}]*@(?:[^ \t\n\f\r\"<>|(){}.\u00a0]+\\.)*"
        "[^ \t\n\f\r\"<>|(){}.\u00a0]+(?:&gt;|>)?"
    )
    extensions = (
        "bat|bmp|bz2|c|class|cgi|cpp|dll|doc|docx|exe|gif|gz|h|htm|html|jar|java|jpeg|jpg|mov|mp3|pdf|php|pl|png|"
        "ppt|ps|py|sql|tar|txt|wav|x|xml|zip|3gp|wm[va]|avi|flv|mov|mp[34g]"
    )
    filename = f"(?P<t>{alnum}+(?:\\.{alnum}+)*\\.(?ai:{extensions}))(?:{spacenl}|[.?!,])"
    smiley = "[<>]?[:;=][\\-o\\*']?[\\(\\)DPdpO\\\\{@\\|\\[\\]]"
    asian = (
        "[\\^x=~<>]\\.\\[\\^x=~<>]", "[\\-\\^x=~<>']_[\\-\\^x=~<>']", "\\([\\-\\^x=~<>'][_.]?[\\-\\^x=~<>']\\)",
        "\\([\\^x=~<>']-[\\^x=~<>'`]\\)",
    )
    phone = (
        "(?:\\([0-9]{2,3}\\)[ \u00a0]?|(?:\\+\\+?)?(?:[0-9]{2,4}[\\- \u00a0])?[0-9]{2,4}[\\- \u00a0])[0-9]{3,4}"
        "[\\- \u00a0]?[0-9]{3,5}",
        "(?:(?:\\+\\+?)?[0-9]{2,4}\\.)?[0-9]{2,4}\\.[0-9]{3,4}\\.[0-9]{3,5}",
    )
    thing_head = f"(?:[dDoOlL]{aposetc}{alnum})?"
    thing = f"{thing_head}{alnum}+(?:{hyphen}{thing_head}{alnum}+)*"
    hthing = f"[A-Za-z0-9][A-Za-z0-9.,\u00ad]*(?:-(?:{acro}\\.|[A-Za-z0-9\u00ad]+))+"
    thinga = "[A-Z]+(?:(?:[+&]|&amp;)[A-Z]+)+"

    table: list[tuple[str, str | tuple[str, ...], Action, Callable[[str], int] | None]] = [
        ("programming_language", "(?ai:c\\+\\+|[cf]#)", _keep, None),
        ("assimilation3", "(?ai:cannot|'twas)", _keep, lambda t: 3),
        ("assimilation2", "(?ai:'tis|gonna|gotta|lemme|gimme|wanna)", _keep, lambda t: 2),
        ("sgml", sgml, _nbsp, None),
        ("mdash", "&(?:MD|mdash|ndash);|[\u0096\u0097\u2013\u2014\u2015]", _const("--"), None),
        ("amp", "&amp;", _const("&"), None),
        ("sppunc", "&(?:HT|TL|UR|LR|QC|QL|QR|odq|cdq|#[0-9]+);", _keep, None),
        ("word_redaux", f"(?P<t>{word}){redaux}", _soft_hyphens, None),
        ("sword_sredaux", f"(?P<t>[A-Za-z\u00ad]*[A-MO-Za-mo-z]\u00ad*){sredaux}", _soft_hyphens, None),
        ("word", word, _soft_hyphens, None),
        ("apoword", apoword, _keep, None),
        ("apoword2", f"(?P<t>[yY]{apos}){plain_letter}", _keep, None),
        ("fullurl", fullurl, _keep, None),
        ("likelyurl", likelyurl, _keep, None),
        ("email", email, _keep, None),
        ("twitter", ("@[a-zA-Z_][a-zA-Z_0-9]*", f"#{letter}+"), _keep, None),
        ("redaux_ctx", f"(?P<t>{redaux})[^A-Za-z]", _quotes(False), None),
        ("sredaux", sredaux, _quotes(False), None),
        ("date", f"{digit}{{1,2}}[\\-/]{digit}{{1,2}}[\\-/]{digit}{{2,4}}", _keep, None),
        ("number", number, _soft_hyphens, None),
        ("subsupnum", "[\u207a\u207b\u208a\u208b]?(?:[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+|[\u2080-\u2089]+)", _keep, None),
        ("frac", f"(?:{digit}{{1,4}}[- \u00a0])?{digit}{{1,4}}(?:\\\\?/|\u2044){digit}{{1,4}}", _nbsp, None),
        ("frac2", "[\u00bc\u00bd\u00be\u2153-\u215e]", _fraction, None),
        ("tbspec", ("-(?ai:RRB|LRB|RCB|LCB|RSB|LSB)-", f"(?ai:C\\.D\\.s|pro-|anti-|S(?:&|&amp;)P-500|S(?:&|&amp;)Ls|Cap{apos}n|c{apos}est)"), _amp, None),
        ("thing3", "[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}(?:\\\\?/[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}){1,2}", _keep, None),
        ("dolsign", "[A-Z]*\\$|#", _keep, None),
        ("dolsign2", "[\u00a2\u00a3\u00a4\u00a5\u0080\u20a0\u20ac\u060b\u0e3f\u20a4\uffe0\uffe1\uffe5\uffe6]", _currency, None),
        ("acronym_end", f"(?P<t>(?:{acro}|[A-Za-z])\\.){spacenl}+(?:{sentence_starters}|{sgml}){spacenl}", _keep, _one),
        ("abbrev3", f"(?P<t>(?ai:ca|figs?|prop|nos?|arts?|bldg|pp|op)\\.){spacenl}?{digit}", _keep, None),
        ("pty_ltd", f"(?P<t>(?ai:pt[ey]|co)\\.){space}(?ai:ltd|lim)", _keep, None),
        ("abbrev1_end", f"(?P<t>{abbrev1}){spacenl}(?:{spacenl}|{upper}|{sgml})", _keep, _one),
        ("abbrev1_any", f"(?P<t>{abbrev1})[\\s\\S]{{2}}", _keep, None),
        ("abbrev1", abbrev1, _keep, None),
        ("abbrev2", f"{abbrev4}\\.", _keep, None),
        ("abbrev4", f"(?P<t>{abbrev4}){space}", _keep, None),
        ("acro", f"(?P<t>{acro}){spacenl}", _keep, None),
        ("tbspec2", f"(?P<t>{apos}[0-9][0-9]){spacenl}", _keep, None),
        ("filename", filename, _keep, None),
        ("word_period", f"(?P<t>{word}\\.){insentp}", _soft_hyphens, None),
        ("phone", phone, _phone, None),
        ("dblquote_left", f"(?P<t>{dblquot})[A-Za-z0-9$]", _quotes(True), None),
        ("dblquote", dblquot, _quotes(False), None),
        ("delete", "\x7f", _drop, None),
        ("lessthan", "<|&lt;", _const("<"), None),
        ("greaterthan", ">|&gt;", _const(">"), None),
        ("smiley", f"(?P<t>{smiley})[^A-Za-z0-9]", _parens, None),
        ("asian_smiley", asian, _parens, None),
        ("lcb", "\\{", _const("-LCB-"), None),
        ("rcb", "\\}", _const("-RCB-"), None),
        ("lsb", "\\[", _const("-LSB-"), None),
        ("rsb", "\\]", _const("-RSB-"), None),
        ("lrb", "\\(", _const("-LRB-"), None),
        ("rrb", "\\)", _const("-RRB-"), None),
        ("hyphens", "-+", _dashes, None),
        ("ldots", ("\\.{3,5}", "(?:\\.[ \u00a0]){2,4}\\.", "[\u0085\u2026]"), _const("..."), None),
        ("fnmarks", ("@+", "#+", "_+"), _keep, None),
        ("asterisks", ("\\*+", "(?:\\\\\\*){1,3}"), _keep, None),
        ("insentp", insentp, _keep, None),
        ("bang", "[?!]+", _keep, None),
        ("period", "[.\u00a1\u00bf\u037e\u0589\u061f\u06d4\u0700-\u0702\u07fa\u3002]", _keep, None),
        ("equals", "=", _keep, None),
        ("slash", "/", _keep, None),
        ("hthing_period", f"(?P<t>{hthing}\\.){insentp}", _soft_hyphens, None),
        ("hthing", hthing, _soft_hyphens, None),
        ("thing_period", f"(?P<t>{thing}\\.){insentp}", _keep, None),
        ("thing", thing, _keep, None),
        ("thinga_period", f"(?P<t>{thinga}\\.){insentp}", _amp, None),
        ("thinga", thinga, _amp, None),
        ("quote_left", "(?P<t>')[A-Za-z][^ \t\n\r\u00a0]", _quotes(True), None),
        ("redaux", redaux, _quotes(False), None),
        ("quotes", quotes, _quotes(False), None),
        ("duckfeet", "<<|>>", _keep, None),
        ("misc", misc, _keep, None),
        ("space", ("\x00", f"{space}+", "[\u200b\u200e\u200f\ufeff]"), _drop, None),
        ("newline", newline, _const("\n"), None),
        ("nbsp_entity", "&nbsp;", _drop, None),
    ]
    reduplicating: dict[str, Callable[[str], bool]] = {"acronym_end": lambda t: len(t) > 2, "abbrev1_end": lambda t: True}
    return tuple(
        _Rule(
            name,
            tuple(re.compile(p) for p in ((patterns,) if isinstance(patterns, str) else patterns)),
            action,
            pushback,
            reduplicating.get(name),
        )
        for name, patterns, action, pushback in table
    )


# ---------------------------------------------------------------------------------------------------------
# Dispatch by first character (an optimisation only): a rule is tried at a position only if its pattern can
# start with the character there. The first-character sets come from the parsed patterns, over-approximated
# (anything the analysis does not model counts as "any character").
# ---------------------------------------------------------------------------------------------------------

CharTest = Callable[[str], bool]


def _class_test(items: list, ignorecase: bool) -> CharTest | None:
    """Membership test of a parsed ``[...]`` class (None: too broad to model)."""
    chars: set[str] = set()
    ranges: list[tuple[int, int]] = []
    categories: list[CharTest] = []
    known = {"CATEGORY_DIGIT": str.isdecimal, "CATEGORY_SPACE": str.isspace,
             "CATEGORY_WORD": lambda ch: ch.isalnum() or ch == "_"}
    for op, value in items:
        if str(op) == "LITERAL":
            chars.add(chr(value))
        elif str(op) == "RANGE":
            ranges.append(value)
        elif str(op) == "CATEGORY" and str(value) in known:
            categories.append(known[str(value)])
        else:  # NEGATE, negated categories
            return None

    def test(ch: str) -> bool:
        for variant in {ch, ch.lower(), ch.upper()} if ignorecase else (ch,):
            if len(variant) != 1:
                continue
            code = ord(variant)
            if variant in chars or any(lo <= code <= hi for lo, hi in ranges) or any(f(variant) for f in categories):
                return True
        return False

    return test


def _first(tree: list, ignorecase: bool) -> tuple[list[CharTest] | None, bool]:
    """Tests for the characters a parsed regex sequence can start with (None: any), and whether it can be empty."""
    tests: list[CharTest] = []
    for op, value in tree:
        name = str(op)
        nullable = False
        if name == "LITERAL":
            char = chr(value)
            tests.append(
                (lambda ch, c=char.lower(): ch.lower() == c or ch.upper() == c.upper()) if ignorecase
                else (lambda ch, c=char: ch == c)
            )
        elif name == "IN":
            test = _class_test(value, ignorecase)
            if test is None:
                return None, False
            tests.append(test)
        elif name == "BRANCH":
            nullable = False
            for branch in value[1]:
                sub, empty = _first(branch, ignorecase)
                if sub is None:
                    return None, False
                tests += sub
                nullable = nullable or empty
        elif name == "SUBPATTERN":
            _, add, remove, sub_tree = value
            case = (ignorecase or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE
            sub, nullable = _first(sub_tree, case)
            if sub is None:
                return None, False
            tests += sub
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _, sub_tree = value
            sub, empty = _first(sub_tree, ignorecase)
            if sub is None:
                return None, False
            tests += sub
            nullable = empty or low == 0
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            nullable = True
        else:  # ANY, NOT_LITERAL, group references, ...
            return None, False
        if not nullable:
            return tests, False
    return tests, True


def _first_test(pattern: re.Pattern[str]) -> CharTest | None:
    """A test for the first character of any non-empty match of ``pattern`` (None: any character)."""
    try:
        tree = list(_parser.parse(pattern.pattern, pattern.flags))
    except Exception:  # an unexpected parser version: no dispatch, every rule is tried
        return None
    tests, nullable = _first(tree, bool(pattern.flags & re.IGNORECASE))
    if tests is None or nullable:
        return None
    return lambda ch: any(test(ch) for test in tests)


@functools.cache
def _first_tests() -> tuple[tuple[_Rule, re.Pattern[str], CharTest | None], ...]:
    return tuple((rule, pattern, _first_test(pattern)) for rule in _rules() for pattern in rule.patterns)


_CANDIDATES: dict[str, tuple[tuple[_Rule, re.Pattern[str]], ...]] = {}


def _candidates(char: str) -> tuple[tuple[_Rule, re.Pattern[str]], ...]:
    """The (rule, pattern) pairs, in rule order, whose matches can start with ``char``."""
    found = _CANDIDATES.get(char)
    if found is None:
        found = tuple((rule, pattern) for rule, pattern, test in _first_tests() if test is None or test(char))
        _CANDIDATES[char] = found
    return found


# ---------------------------------------------------------------------------------------------------------
# The scanner
# ---------------------------------------------------------------------------------------------------------

# Runs of ASCII-letter words, each followed by a space or the end: each is a token of its own (no rule that
# starts with a letter and matches across a space produces anything else) unless an assimilation ("cannot").
_PLAIN = re.compile(r" *([A-Za-z]+(?: +[A-Za-z]+)*)(?= |\Z)| +")
_ASSIMILATIONS = frozenset({"cannot", "gonna", "gotta", "lemme", "gimme", "wanna"})
_SPACE = re.compile(r"\s")


def _longest(pattern: re.Pattern[str], text: str, pos: int, chunk_end: int) -> re.Match[str] | None:
    """The longest match of ``pattern`` at ``pos`` (JFlex semantics), looking up to the end of the current
    run of non-space characters: Python's ``re`` returns the first match its backtracking finds, which may be
    shorter than another path (``5km``: a number ``5`` or a word ``5km``)."""
    match = pattern.match(text, pos)
    if match is None or match.end() >= chunk_end:
        return match
    for stop in range(chunk_end, match.end(), -1):
        longer = pattern.fullmatch(text, pos, stop)
        if longer is not None:
            return longer
    return match


def lex(text: str) -> Iterator[str]:
    """PTB tokens of ``text`` in the jar's spelling (before lower-casing); ``"\n"`` for each line break."""
    pos, end = 0, len(text)
    while pos < end:
        if text[pos] == "\n":
            yield "\n"
            pos += 1
            continue
        plain = _PLAIN.match(text, pos)
        if plain is not None:
            words = plain.group().split()
            if _ASSIMILATIONS.isdisjoint(word.lower() for word in words):
                yield from words
                pos = plain.end()
                continue
        best: re.Match[str] | None = None
        best_rule: _Rule | None = None
        chunk = _SPACE.search(text, pos)
        chunk_end = end if chunk is None else chunk.start()
        for rule, pattern in _candidates(text[pos]):
            match = _longest(pattern, text, pos, chunk_end)
            if match is not None and match.end() > pos and (best is None or match.end() > best.end()):
                best, best_rule = match, rule
        if best is None or best_rule is None:  # untokenizable: the jar deletes it (and warns once)
            pos += 1
            continue
        token = best.group("t") if "t" in best.re.groupindex else best.group()
        consumed = len(token)
        if best_rule.pushback is not None:
            back = best_rule.pushback(token)
            consumed -= back
            if best_rule.reduplicate is None or not best_rule.reduplicate(token):
                token = token[:consumed]
        yield from best_rule.action(token)
        pos += consumed


def split_lines(text: str) -> list[list[str]]:
    """Lower-cased tokens of each line of ``text``, as ``PTBTokenizer -preserveLines -lowerCase`` prints them."""
    lines: list[list[str]] = [[]]
    for token in lex(text):
        if token == "\n":
            lines.append([])
        else:
            lines[-1].append(token.lower())
    return lines

