"""Synthetic credential and PII values in their real-world formats (stdlib only).

Every value is random; where a format carries a checksum or check digit (card Luhn, IBAN
mod-97, national ids, GitHub's CRC32 suffix, ISBNs) it is computed, so a validator accepts it.
Written from the public format specifications, not from the project's detectors.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import struct
import uuid
import zlib

UP = string.ascii_uppercase
LO = string.ascii_lowercase
DIG = string.digits
ALNUM = UP + LO + DIG
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"
B32 = UP + "234567"
B62 = DIG + UP + LO

FIRST = [
    "Priya",
    "Marcus",
    "Aisha",
    "Tomasz",
    "Elena",
    "Jun",
    "Fatima",
    "Lars",
    "Chloe",
    "Diego",
    "Hannah",
    "Kwame",
    "Sofia",
    "Mateo",
    "Ingrid",
    "Ravi",
    "Yuki",
    "Oliver",
    "Amara",
    "Niamh",
    "Sebastian",
    "Leila",
    "Gregor",
    "Mei",
    "Jonas",
    "Isabel",
    "Tariq",
    "Freya",
    "Andrei",
    "Camille",
    "Noah",
    "Zainab",
    "Pieter",
    "Lucia",
    "Ethan",
    "Ayesha",
]
LAST = [
    "Raman",
    "Okafor",
    "Lindqvist",
    "Kowalski",
    "Moreau",
    "Tanaka",
    "Haddad",
    "Brennan",
    "Fischer",
    "Alvarez",
    "Novak",
    "Mensah",
    "Rossi",
    "Herrera",
    "Johansson",
    "Iyer",
    "Nakamura",
    "Whitfield",
    "Adeyemi",
    "Gallagher",
    "Vogel",
    "Karimi",
    "Petrov",
    "Chen",
    "De Vries",
    "Santos",
    "Malik",
    "Olsen",
    "Popescu",
    "Laurent",
    "Becker",
    "Osei",
    "Van Dijk",
    "Marino",
    "Walsh",
    "Siddiqui",
]

WORDS = [
    "harbor",
    "maple",
    "orbit",
    "canyon",
    "falcon",
    "ember",
    "quartz",
    "willow",
    "cobalt",
    "meadow",
    "summit",
    "lantern",
    "copper",
    "river",
    "thistle",
    "granite",
    "comet",
    "velvet",
    "saffron",
    "tundra",
    "pepper",
    "violet",
]
SEASONS = ["Summer", "Winter", "Spring", "Autumn", "Welcome", "Monday", "Coffee", "Dragon", "Sunshine", "Football"]


def luhn_digit(payload: str) -> str:
    """The check digit that makes ``payload + digit`` pass the Luhn test."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def iban_check(cc: str, bban: str) -> str:
    num = "".join(str(int(ch, 36)) for ch in bban + cc + "00")
    return f"{98 - int(num) % 97:02d}"


_CIN_ODD = [1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25, 24, 23]


def _odd_even_letter(s: str) -> str:
    """The Italian check letter (CIN of an IBAN, last character of a codice fiscale)."""
    total = 0
    for i, ch in enumerate(s):
        v = int(ch) if ch.isdigit() else ord(ch) - 65
        total += _CIN_ODD[v] if i % 2 == 0 else v
    return UP[total % 26]


_VD = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
    [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
    [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
    [4, 0, 1, 2, 3, 9, 5, 6, 7, 8],
    [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2],
    [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
    [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
]
_VP = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
    [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
    [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
    [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
    [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
    [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
    [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
]
_VINV = [0, 4, 3, 2, 1, 5, 6, 7, 8, 9]


def verhoeff_digit(payload: str) -> str:
    c = 0
    for i, ch in enumerate(reversed(payload)):
        c = _VD[c][_VP[(i + 1) % 8][int(ch)]]
    return str(_VINV[c])


def b62(n: int, width: int) -> str:
    out = ""
    while n:
        n, r = divmod(n, 62)
        out = B62[r] + out
    return out.rjust(width, "0")


def group(s: str, size: int = 4, sep: str = " ") -> str:
    return sep.join(s[i : i + size] for i in range(0, len(s), size))


def pem_wrap(der: bytes, width: int = 64) -> list[str]:
    b = base64.b64encode(der).decode()
    return [b[i : i + width] for i in range(0, len(b), width)]


class Gen:
    """All randomness of the corpus comes from one seeded ``random.Random``."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    # -- primitives
    def s(self, alphabet: str, n: int) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def pick(self, seq):
        return self.r.choice(seq)

    def sample(self, seq, k: int):
        return self.r.sample(list(seq), k)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def digits(self, n: int, first_nonzero: bool = False) -> str:
        d = self.s(DIG, n)
        if first_nonzero and d[0] == "0":
            d = self.pick("123456789") + d[1:]
        return d

    def randbytes(self, n: int) -> bytes:
        return bytes(self.r.getrandbits(8) for _ in range(n))

    def int(self, a: int, b: int) -> int:
        return self.r.randint(a, b)

    # -- people
    def person(self) -> tuple[str, str]:
        return self.pick(FIRST), self.pick(LAST)

    def email(self, first: str, last: str, domain: str) -> str:
        f, ln = first.lower(), last.lower().replace(" ", "")
        style = self.int(0, 4)
        local = [f"{f}.{ln}", f"{f[0]}{ln}", f"{f}_{ln[0]}", f"{f}.{ln}{self.int(1, 99)}", f"{f}"][style]
        return f"{local}@{domain}"

    def personal_email(self, first: str, last: str) -> str:
        f, ln = first.lower(), last.lower().replace(" ", "")
        dom = self.pick(["gmail.com", "outlook.com", "yahoo.co.uk", "proton.me", "web.de", "icloud.com", "hotmail.fr", "gmx.net"])
        local = self.pick(
            [f"{f}.{ln}{self.int(70, 99)}", f"{f}{ln}", f"{f[0]}.{ln}", f"{f}+{self.pick(['shop', 'news', 'work'])}", f"{ln}.{f}"]
        )
        return f"{local}@{dom}"

    # -- cloud
    def aws_key_id(self, prefix: str = "AKIA") -> str:
        return prefix + self.s(B32, 16)

    def aws_secret(self) -> str:
        return self.s(B64, 40)

    def gcp_api_key(self) -> str:
        return "AIza" + self.s(B64URL, 35)

    def azure_account_key(self) -> str:
        return base64.b64encode(self.randbytes(64)).decode()  # 88 chars, ends "=="

    def azure_sas_sig(self) -> str:
        raw = base64.b64encode(self.randbytes(32)).decode()  # 44 chars with "="
        return raw.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")

    # -- code hosts and registries
    def github(self, prefix: str = "ghp_") -> str:
        body = self.s(ALNUM, 30)
        return prefix + body + b62(zlib.crc32(body.encode()), 6)

    def github_fine(self) -> str:
        return "github_pat_" + self.s(UP + DIG, 22) + "_" + self.s(ALNUM, 59)

    def gitlab(self) -> str:
        return "glpat-" + self.s(ALNUM + "-_", 20)

    def npm(self) -> str:
        body = self.s(ALNUM, 30)
        return "npm_" + body + b62(zlib.crc32(body.encode()), 6)

    def pypi(self) -> str:
        return "pypi-AgEIcHlwaS5vcmcCJ" + self.s(B64URL, 157)

    def hf(self) -> str:
        return "hf_" + self.s(UP + LO, 34)

    # -- SaaS
    def slack_bot(self) -> str:
        return f"xoxb-{self.digits(11, True)}-{self.digits(13, True)}-{self.s(ALNUM, 24)}"

    def slack_user(self) -> str:
        return f"xoxp-{self.digits(11, True)}-{self.digits(11, True)}-{self.digits(13, True)}-{self.s(HEX, 32)}"

    def slack_webhook(self) -> tuple[str, str]:
        secret = self.s(ALNUM, 24)
        return f"https://hooks.slack.com/services/T{self.s(UP + DIG, 8)}/B{self.s(UP + DIG, 10)}/{secret}", secret

    def stripe(self, kind: str = "sk") -> str:
        if self.chance(0.5):
            return f"{kind}_live_" + self.s(ALNUM, 24)
        return f"{kind}_live_51" + self.s(ALNUM, 97)

    def stripe_whsec(self) -> str:
        return "whsec_" + self.s(ALNUM, 32)

    def openai(self) -> str:
        kind = self.int(0, 2)
        if kind == 0:
            return "sk-" + self.s(ALNUM, 20) + "T3BlbkFJ" + self.s(ALNUM, 20)
        if kind == 1:
            return "sk-proj-" + self.s(B64URL, 74) + "T3BlbkFJ" + self.s(B64URL, 74)
        return "sk-svcacct-" + self.s(B64URL, 74) + "T3BlbkFJ" + self.s(B64URL, 74)

    def anthropic(self) -> str:
        return "sk-ant-api03-" + self.s(B64URL, 93) + "AA"

    def twilio_sid(self) -> str:
        return "AC" + self.s(HEX, 32)

    def twilio_api_key(self) -> str:
        return "SK" + self.s(HEX, 32)

    def sendgrid(self) -> str:
        return "SG." + self.s(B64URL, 22) + "." + self.s(B64URL, 43)

    def mailgun(self) -> str:
        return "key-" + self.s(HEX, 32)

    def django_secret(self) -> str:
        return "django-insecure-" + self.s(LO + DIG + "!@#%^&*(-_=+)", 50) if self.chance(0.5) else self.s(LO + DIG + "!@#%^&*(-_=+)", 50)

    # -- tokens
    def jwt(self, sub: str, iss: str, alg: str = "HS256") -> str:
        def enc(obj) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

        iat = 1700000000 + self.int(0, 20_000_000)
        head = {"alg": alg, "typ": "JWT"} if alg == "HS256" else {"alg": alg, "kid": self.s(HEX, 16), "typ": "JWT"}
        payload = {"sub": sub, "iss": iss, "iat": iat, "exp": iat + 3600, "scope": self.pick(["read write", "admin", "payments:write"])}
        sig_len = 32 if alg == "HS256" else 256
        sig = base64.urlsafe_b64encode(self.randbytes(sig_len)).rstrip(b"=").decode()
        return f"{enc(head)}.{enc(payload)}.{sig}"

    def opaque_token(self, n: int = 40) -> str:
        return self.s(ALNUM, n)

    # -- private keys (DER with the real structure prefix, random key material)
    def pem(self, kind: str) -> tuple[str, list[str]]:
        """(PEM text, its body lines)."""
        if kind == "rsa":
            label, der = "RSA PRIVATE KEY", bytes.fromhex("308204a40201000282010100") + self.randbytes(1180)
        elif kind == "pkcs8":
            label = "PRIVATE KEY"
            der = bytes.fromhex("308204be020100300d06092a864886f70d0101010500048204a8308204a40201000282010100") + self.randbytes(1180)
        elif kind == "ec":
            label = "EC PRIVATE KEY"
            der = (
                bytes.fromhex("307702010104 20".replace(" ", ""))
                + self.randbytes(32)
                + bytes.fromhex("a00a06082a8648ce3d030107a144034200 04".replace(" ", ""))
                + self.randbytes(64)
            )
        elif kind == "encrypted":
            label = "ENCRYPTED PRIVATE KEY"
            der = bytes.fromhex("3082051c304e06092a864886f70d01050d3041302906092a864886f70d01050c301c0408") + self.randbytes(1270)
        elif kind == "openssh":
            label = "OPENSSH PRIVATE KEY"
            pub, priv = self.randbytes(32), self.randbytes(32)

            def sstr(b: bytes) -> bytes:
                return struct.pack(">I", len(b)) + b

            pubblob = sstr(b"ssh-ed25519") + sstr(pub)
            check = self.randbytes(4)
            section = check + check + sstr(b"ssh-ed25519") + sstr(pub) + sstr(priv + pub) + sstr(b"deploy@ci-runner")
            section += bytes(range(1, 1 + (-len(section)) % 8))
            der = b"openssh-key-v1\0" + sstr(b"none") + sstr(b"none") + sstr(b"") + struct.pack(">I", 1) + sstr(pubblob) + sstr(section)
            lines = pem_wrap(der, 70)
            return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----", lines
        elif kind == "pgp":
            lines = pem_wrap(bytes.fromhex("9503980465") + self.randbytes(940))
            crc = "=" + base64.b64encode(self.randbytes(3)).decode()
            text = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + "\n".join(lines) + f"\n{crc}\n-----END PGP PRIVATE KEY BLOCK-----"
            return text, lines
        else:
            raise ValueError(kind)
        lines = pem_wrap(der)
        return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----", lines

    def cert(self) -> tuple[str, list[str]]:
        lines = pem_wrap(bytes.fromhex("308203") + self.randbytes(760))
        return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----", lines

    def ssh_pub(self, comment: str) -> str:
        blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + self.randbytes(32)
        return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"

    # -- passwords
    def password(self, style: str | None = None) -> str:
        style = style or self.pick(["human", "human", "random", "passphrase", "leet"])
        if style == "human":
            return f"{self.pick(SEASONS)}{self.pick(['2023', '2024', '2025', '123', '99'])}{self.pick('!#$*.?')}"
        if style == "random":
            return self.s(ALNUM + "!@#%^&*-_=+", self.int(14, 22))
        if style == "passphrase":
            return "-".join(self.sample(WORDS, 3)) + f"-{self.int(10, 99)}"
        if style == "leet":
            w = self.pick(WORDS).replace("a", "@").replace("o", "0").replace("e", "3")
            return w.capitalize() + self.pick(["!", "#", "$$"]) + str(self.int(10, 999))
        if style == "urlsafe":
            return self.s(ALNUM, self.int(6, 8)) + self.pick(["-", "_", "."]) + self.s(ALNUM, self.int(6, 12))
        raise ValueError(style)

    def url_password(self) -> str:
        return self.s(ALNUM, self.int(6, 9)) + self.pick(["-", "_", ".", "~", ""]) + self.s(ALNUM, self.int(6, 12))

    # -- PII
    def phone_us(self) -> str:
        area = self.pick(["212", "312", "415", "617", "646", "206", "512", "303", "404", "720", "929", "628", "737", "470"])
        while True:
            ex = self.pick("23456789") + self.digits(2)
            if ex[1:] != "11" and ex != "555":
                break
        line = self.digits(4)
        fmt = self.int(0, 5)
        return [
            f"({area}) {ex}-{line}",
            f"{area}-{ex}-{line}",
            f"{area}.{ex}.{line}",
            f"+1 {area} {ex} {line}",
            f"+1-{area}-{ex}-{line}",
            f"1 ({area}) {ex}-{line}",
        ][fmt]

    def phone_intl(self) -> str:
        d = self.digits
        opts = [
            lambda: f"+44 20 7{d(3)} {d(4)}",
            lambda: f"+44 7{self.pick('3456789')}{d(2)} {d(6)}",
            lambda: f"020 7{d(3)} {d(4)}",
            lambda: f"07{self.pick('3456789')}{d(2)} {d(3)} {d(3)}",
            lambda: f"+49 30 {d(8, True)}",
            lambda: f"+49 (0)89 {d(4, True)} {d(4)}",
            lambda: f"+49 15{self.pick('1279')} {d(8)}",
            lambda: f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"+33 6 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"06 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"+31 20 {d(3, True)} {d(4)}",
            lambda: f"+31 6 {d(8)}",
            lambda: f"+91 9{d(4)} {d(5)}",
            lambda: f"+81 3-{d(4)}-{d(4)}",
            lambda: f"+81 90-{d(4)}-{d(4)}",
            lambda: f"+61 2 9{d(3)} {d(4)}",
            lambda: f"+61 4{d(2)} {d(3)} {d(3)}",
            lambda: f"+55 11 9{d(4)}-{d(4)}",
            lambda: f"+34 6{d(2)} {d(3)} {d(3)}",
            lambda: f"+353 1 {d(3, True)} {d(4)}",
            lambda: f"+353 8{self.pick('3567')} {d(3)} {d(4)}",
            lambda: f"+65 {self.pick('689')}{d(3)} {d(4)}",
            lambda: f"+41 44 {d(3, True)} {d(2)} {d(2)}",
            lambda: f"+46 8 {d(3, True)} {d(2)} {d(2)}",
            lambda: f"+48 {self.pick('5678')}{d(2)} {d(3)} {d(3)}",
        ]
        return self.pick(opts)()

    def card(self, brand: str | None = None, fmt: str | None = None) -> tuple[str, str]:
        brand = brand or self.pick(["visa", "visa", "mastercard", "mastercard2", "amex", "discover", "jcb", "diners", "unionpay"])
        if brand == "visa":
            p = "4" + self.digits(14)
        elif brand == "mastercard":
            p = "5" + self.pick("12345") + self.digits(13)
        elif brand == "mastercard2":
            p = str(self.int(2221, 2720)) + self.digits(11)
        elif brand == "amex":
            p = self.pick(["34", "37"]) + self.digits(12)
        elif brand == "discover":
            p = "6011" + self.digits(11)
        elif brand == "jcb":
            p = str(self.int(3528, 3589)) + self.digits(11)
        elif brand == "diners":
            p = "36" + self.digits(11)
        else:
            p = "62" + self.digits(13)
        n = p + luhn_digit(p)
        fmt = fmt or self.pick(["space", "space", "dash", "plain"])
        if len(n) == 15:
            parts = [n[:4], n[4:10], n[10:]]
        elif len(n) == 14:
            parts = [n[:4], n[4:10], n[10:]]
        else:
            parts = [n[i : i + 4] for i in range(0, 16, 4)]
        out = {"space": " ".join(parts), "dash": "-".join(parts), "plain": n}[fmt]
        return out, brand.rstrip("2")

    def iban(self, cc: str | None = None, printed: bool | None = None) -> tuple[str, str]:
        cc = cc or self.pick(["DE", "GB", "FR", "ES", "NL", "BE", "IT", "CH", "PL", "IE"])
        d = self.digits
        if cc == "DE":
            bban = d(8, True) + d(10)
        elif cc == "GB":
            bban = self.pick(["NWBK", "BARC", "LOYD", "HBUK", "MIDL"]) + d(6) + d(8)
        elif cc == "IE":
            bban = self.pick(["AIBK", "BOFI"]) + d(6) + d(8)
        elif cc == "FR":
            bank, branch, acct = d(5), d(5), d(11)
            key = 97 - (89 * int(bank) + 15 * int(branch) + 3 * int(acct)) % 97
            bban = bank + branch + acct + f"{key:02d}"
        elif cc == "ES":
            w = [1, 2, 4, 8, 5, 10, 9, 7, 3, 6]

            def dc(s: str) -> str:
                v = 11 - sum(int(a) * b for a, b in zip(s, w)) % 11
                return str({11: 0, 10: 1}.get(v, v))

            bank, branch, acct = d(4), d(4), d(10)
            bban = bank + branch + dc("00" + bank + branch) + dc(acct) + acct
        elif cc == "NL":
            while True:
                acct = d(10)
                if sum(int(a) * (10 - i) for i, a in enumerate(acct)) % 11 == 0 and acct[0] != "0":
                    break
            bban = self.pick(["ABNA", "RABO", "INGB", "TRIO", "SNSB"]) + acct
        elif cc == "BE":
            first = self.pick(["001", "068", "310", "363", "735"]) + d(7)
            chk = int(first) % 97 or 97
            bban = first + f"{chk:02d}"
        elif cc == "IT":
            rest = d(5) + d(5) + d(12)
            bban = _odd_even_letter(rest) + rest
        elif cc == "CH":
            bban = "00" + d(3) + d(12)
        elif cc == "PL":
            sort7 = d(7, True)
            chk = (10 - sum(int(a) * b for a, b in zip(sort7, [3, 9, 7, 1, 3, 9, 7])) % 10) % 10
            bban = sort7 + str(chk) + d(16)
        else:
            raise ValueError(cc)
        iban = cc + iban_check(cc, bban) + bban
        printed = self.chance(0.6) if printed is None else printed
        return (group(iban) if printed else iban), cc

    def ssn(self) -> str:
        while True:
            area = self.int(1, 899)
            if area != 666:
                break
        return f"{area:03d}-{self.int(1, 99):02d}-{self.int(1, 9999):04d}"

    def nino(self, spaced: bool | None = None) -> str:
        first = "ABCEGHJKLMNOPRSTWXYZ"
        second = "ABCEGHJKLMNPRSTWXYZ"
        while True:
            pre = self.pick(first) + self.pick(second)
            if pre not in ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ"):
                break
        num = self.digits(6)
        suf = self.pick("ABCD")
        spaced = self.chance(0.5) if spaced is None else spaced
        return f"{pre} {num[:2]} {num[2:4]} {num[4:]} {suf}" if spaced else f"{pre}{num}{suf}"

    def de_idnr(self) -> str:
        while True:
            ds = self.sample(range(10), 9)
            ds.append(self.pick(ds))
            self.r.shuffle(ds)
            if ds[0] != 0:
                break
        product = 10
        for x in ds:
            s = (x + product) % 10 or 10
            product = (s * 2) % 11
        chk = 11 - product
        return "".join(map(str, ds)) + str(0 if chk == 10 else chk)

    def fr_nir(self) -> str:
        body = (
            self.pick("12")
            + f"{self.int(50, 99):02d}"
            + f"{self.int(1, 12):02d}"
            + self.pick(["75", "69", "13", "33", "59", "92"])
            + f"{self.int(1, 990):03d}"
            + f"{self.int(1, 999):03d}"
        )
        key = 97 - int(body) % 97
        return f"{body[0]} {body[1:3]} {body[3:5]} {body[5:7]} {body[7:10]} {body[10:13]} {key:02d}"

    def es_dni(self) -> str:
        n = self.digits(8, True)
        return n + "TRWAGMYFPDXBNJZSQVHLCKE"[int(n) % 23]

    def es_nie(self) -> str:
        p = self.pick("XYZ")
        n = self.digits(7)
        return p + n + "TRWAGMYFPDXBNJZSQVHLCKE"[int(str("XYZ".index(p)) + n) % 23]

    def it_cf(self, first: str, last: str) -> str:
        def cons(s):
            return [c for c in s.upper() if c in "BCDFGHJKLMNPQRSTVWXYZ"]

        def vows(s):
            return [c for c in s.upper() if c in "AEIOU"]

        sc = (cons(last) + vows(last) + ["X"] * 3)[:3]
        fc = cons(first)
        nc = [fc[0], fc[2], fc[3]] if len(fc) >= 4 else (fc + vows(first) + ["X"] * 3)[:3]
        female = self.chance(0.5)
        day = self.int(1, 28) + (40 if female else 0)
        code = (
            "".join(sc)
            + "".join(nc)
            + f"{self.int(50, 99):02d}"
            + self.pick("ABCDEHLMPRST")
            + f"{day:02d}"
            + self.pick(["H501", "F205", "F839", "L219", "G273", "A944", "D612"])
        )
        return code + _odd_even_letter(code)

    def nl_bsn(self) -> str:
        while True:
            n = self.digits(8, True)
            c = sum(int(a) * (9 - i) for i, a in enumerate(n)) % 11
            if c < 10:
                return n + str(c)

    def be_nn(self) -> str:
        yy, mm, dd = self.int(50, 99), self.int(1, 12), self.int(1, 28)
        serial = self.int(1, 997)
        body = f"{yy:02d}{mm:02d}{dd:02d}{serial:03d}"
        chk = 97 - int(body) % 97
        return f"{yy:02d}.{mm:02d}.{dd:02d}-{serial:03d}.{chk:02d}"

    def pl_pesel(self) -> str:
        yy, mm, dd = self.int(50, 99), self.int(1, 12), self.int(1, 28)
        body = f"{yy:02d}{mm:02d}{dd:02d}{self.digits(4)}"
        s = sum(int(a) * w for a, w in zip(body, [1, 3, 7, 9, 1, 3, 7, 9, 1, 3]))
        return body + str((10 - s % 10) % 10)

    def se_pnr(self) -> str:
        body = f"{self.int(50, 99):02d}{self.int(1, 12):02d}{self.int(1, 28):02d}{self.digits(3)}"
        return f"{body[:6]}-{body[6:]}{luhn_digit(body)}"

    def fi_hetu(self) -> str:
        dd, mm, yy = self.int(1, 28), self.int(1, 12), self.int(50, 99)
        nnn = self.int(2, 899)
        body = f"{dd:02d}{mm:02d}{yy:02d}"
        return f"{body}-{nnn:03d}" + "0123456789ABCDEFHJKLMNPRSTUVWXY"[int(f"{body}{nnn:03d}") % 31]

    def ca_sin(self) -> str:
        p = self.pick("1234567") + self.digits(7)
        n = p + luhn_digit(p)
        return f"{n[:3]} {n[3:6]} {n[6:]}"

    def aadhaar(self) -> str:
        while True:
            p = self.pick("23456789") + self.digits(10)
            n = p + verhoeff_digit(p)
            if n != n[::-1]:
                return f"{n[:4]} {n[4:8]} {n[8:]}"

    # -- hard-negative material
    def sha(self, n: int = 40) -> str:
        return self.s(HEX, n)

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.r.getrandbits(128), version=4))

    def sha256_of(self, name: str) -> str:
        return hashlib.sha256((name + str(self.r.random())).encode()).hexdigest()

    def isbn13(self) -> str:
        core = "978" + self.pick(["0", "1"]) + self.digits(8)
        s = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(core))
        chk = (10 - s % 10) % 10
        return f"{core[:3]}-{core[3]}-{core[4:7]}-{core[7:]}-{chk}"

    def isbn10(self) -> str:
        core = self.pick(["0", "1"]) + self.digits(8)
        s = sum(int(c) * (10 - i) for i, c in enumerate(core))
        chk = (11 - s % 11) % 11
        return f"{core[0]}-{core[1:4]}-{core[4:]}-{'X' if chk == 10 else chk}"

    def aws_account(self) -> str:
        return self.digits(12, True)

    def date(self) -> str:
        y, m, dd = self.pick([2023, 2024, 2025]), self.int(1, 12), self.int(1, 28)
        months = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
        return self.pick(
            [
                f"{y}-{m:02d}-{dd:02d}",
                f"{dd:02d}/{m:02d}/{y}",
                f"{months[m - 1]} {dd}, {y}",
                f"{dd} {months[m - 1][:3]} {y}",
                f"{y}-{m:02d}-{dd:02d}T{self.int(0, 23):02d}:{self.int(0, 59):02d}:{self.int(0, 59):02d}Z",
            ]
        )

    def order_no(self) -> str:
        return self.pick(
            [
                f"ORD-{self.pick(['2023', '2024'])}-{self.digits(6, True)}",
                f"PO-{self.digits(7, True)}",
                f"#{self.digits(9, True)}",
                f"INC{self.digits(7)}",
                f"INV-2024-{self.digits(4)}",
                f"SO{self.digits(8, True)}",
                f"RMA-{self.digits(6, True)}",
            ]
        )

    def version(self) -> str:
        return self.pick(
            [
                f"v{self.int(1, 4)}.{self.int(0, 30)}.{self.int(0, 12)}",
                f"{self.int(1, 3)}.{self.int(0, 29)}.{self.int(0, 9)}",
                f"1.{self.int(24, 30)}.{self.int(1, 12)}-eks-{self.sha(7)}",
            ]
        )
