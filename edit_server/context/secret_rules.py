"""The secret rule set: detect-secrets' regex plugins plus supplements for the formats they miss.

A ``Rule`` is a regex (compiled with ``re.M``: texts are scanned whole, ``^``/``$`` are line ends)
whose ``group`` (0: the whole match) is the secret. ``gates``: literals of which one must occur in
the text (in its lower-cased form when ``lower``), else the rule is skipped — scanning a text costs a
few substring searches for most rules. ``keyword`` rules run only on lines that hold a secret-ish word
(``HINT``). ``check`` (optional) must accept the secret too (entropy tests).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# names whose assigned value is a secret: password-like (any value of 3+ chars), token-like
# (credential-shaped values of 8+ chars), key-like (high-entropy values only); parts of a
# snake/camel/kebab-case name are matched, so ``tokenizer`` or ``max_tokens`` are not secrets
PASSWORD_WORDS = frozenset({"password", "passwd", "pwd", "pass", "passphrase", "secret", "secrets",
                            "contrasena", "contraseña", "credential", "credentials", "creds"})
TOKEN_WORDS = frozenset({"token", "auth", "authorization", "bearer", "apikey", "jwt", "dsn"})
KEY_WORDS = frozenset({"key", "salt", "signature", "hmac"})
KEY_PREFIXES = frozenset({"api", "access", "private", "client", "master", "encryption", "signing", "account",
                          "service", "db", "database", "priv", "storage", "auth", "app", "consumer"})
# lower-case substrings of every line an assignment can match (a superset of the words above), and of
# every line detect-secrets' keyword detector can match (its deny list)
HINT = re.compile(r"pass|pwd|secret|token|key|auth|cred|contras|salt|sig|bearer|hmac|jwt|dsn")
DS_HINT = re.compile(r"(?:api|auth|service|account|db|database|priv|private|client)_?key|pass|pwd|secret|"
                     r"contras")
HINT_I = re.compile(HINT.pattern, re.I)  # for texts whose lower-case form has another length

# a line that is only key material (PEM / base64 bodies, also inside a string or after a diff marker)
LONG_RUN = re.compile(r"[A-Za-z0-9_\-+/=]{20,}")
BASE64_LINE = re.compile(r"^[+\- ]?\s*[\"'`]?([A-Za-z0-9+/]{40,}={0,2})(?:\\n)?[\"'`]?\s*[,;+]?\s*$", re.M)


@dataclass(frozen=True)
class Rule:
    name: str
    regex: re.Pattern[str]
    group: int = 0
    gates: tuple[str, ...] = ()  # () = always run
    lower: bool = False
    need: bool = False  # matches hold a run of 20+ key characters: only lines with one are searched
    check: Callable[[str], bool] | None = None


def _rule(name: str, pattern: str, group: int = 0, gates: tuple[str, ...] = (), *, lower: bool = False,
          need: bool = False, check: Callable[[str], bool] | None = None, flags: int = 0) -> Rule:
    return Rule(name, re.compile(pattern, flags | re.M), group, gates, lower, need, check)


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in (s.count(ch) for ch in set(s))) if n else 0.0


def _high_entropy(s: str) -> bool:
    """detect-secrets' base64 limit (above 4.5 bits/char). Bare hex strings are left alone: in code
    they are hashes far more often than keys (hex keys assigned to key/secret/token names are caught
    by the assignment rule)."""
    return not re.fullmatch(r"[0-9a-fA-F]+", s) and _entropy(s) > 4.5


_AWS_IDS = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA", "ABIA", "ACCA", "A3T")
_GITHUB = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
_GITLAB = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-",
           "GR1348941")

SUPPLEMENT_RULES: tuple[Rule, ...] = (
    _rule("aws access key id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|ABIA|ACCA|A3T[A-Z0-9])"
                               r"[0-9A-Z]{16}\b", gates=_AWS_IDS),
    _rule("aws secret access key", r"aws_?secret_?access_?key[\"']?[ \t]*[:=][ \t]*[\"']?([A-Za-z0-9/+=]{40})",
          1, need=True, flags=re.I),
    _rule("github token", r"\b(?:gh[pousr]_[A-Za-z0-9_]{20,}|github_pat_[A-Za-z0-9_]{20,})", gates=_GITHUB),
    _rule("gitlab token", r"\b(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[A-Za-z0-9_\-]{20,}",
          gates=_GITLAB),
    _rule("slack token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,}"
                         r"|hooks\.slack\.com/services/[A-Za-z0-9_/]+", gates=("xox", "xapp-", "hooks.slack.com"),
          lower=True, flags=re.I),
    _rule("stripe key", r"\b[rs]k_(?:live|test)_[0-9a-zA-Z]{10,}", gates=("k_live_", "k_test_")),
    _rule("google api key", r"\bAIza[0-9A-Za-z_\-]{35}", gates=("AIza",)),
    _rule("openai/anthropic key", r"\bsk-(?:proj-|ant-(?:api\d\d-)?|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
          gates=("sk-",)),
    _rule("jwt", r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-+/=]*", gates=("eyJ",)),
    _rule("npm token", r"\bnpm_[A-Za-z0-9]{36}", gates=("npm_",)),
    _rule("bearer token", r"\bbearer[ \t]+([A-Za-z0-9._~+/\-]{16,}=*)", 1, gates=("bearer",), lower=True,
          flags=re.I),
    _rule("credentials in a url", r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/?#@\"'`]*:([^\s/?#@\"'`]+)@", 1,
          gates=("://",)),
    _rule("high-entropy string", r"([\"'`])([A-Za-z0-9+/=_\-]{20,})\1", 2, need=True, check=_high_entropy),
)

# detect-secrets plugins: literals one of which every match of the plugin contains (else the plugin
# is skipped for a text), or a run of key characters every match contains. A plugin not named here
# always runs. Skipped: IP addresses (not secrets), private keys (blocks, in secrets.py).
_SKIP_PLUGINS = {"IPPublicDetector", "PrivateKeyDetector"}
_DS_GATES: dict[str, tuple[tuple[str, ...], bool, bool]] = {  # name -> (gates, lower, need)
    "ArtifactoryDetector": (("AKC", "AP"), False, False),
    "AWSKeyDetector": (("a3t", "abia", "acca", "akia", "asia", "aws"), True, False),
    "AzureStorageKeyDetector": (("AccountKey=",), False, False),
    "BasicAuthDetector": (("://",), False, False),
    "CloudantDetector": ((), False, True),
    "DiscordBotTokenDetector": ((), False, True),
    "GitHubTokenDetector": (_GITHUB[:5], False, False),
    "GitLabTokenDetector": (_GITLAB, False, False),
    "IbmCloudIamDetector": ((), False, True),
    "IbmCosHmacDetector": ((), False, True),
    "JwtTokenDetector": (("eyJ",), False, False),
    "MailchimpDetector": (("-us",), False, False),
    "NpmDetector": (("_authToken",), False, False),
    "OpenAIDetector": (("T3BlbkFJ",), False, False),
    "PypiTokenDetector": (("pypi-",), False, False),
    "SendGridDetector": (("SG.",), False, False),
    "SlackDetector": (("xox", "hooks.slack.com"), True, False),
    "SoftlayerDetector": ((), False, True),
    "SquareOAuthDetector": (("sq0csp-",), False, False),
    "StripeDetector": (("k_live_",), False, False),
    "TelegramBotTokenDetector": ((), False, True),
    "TwilioKeyDetector": (("AC", "SK"), False, False),
}


def detect_secrets_rules() -> tuple[Rule, ...]:
    """The regex-based detect-secrets plugins (their deny lists), as rules."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        log.warning("detect-secrets is not installed: using the built-in secret rules only")
        return ()
    out = []
    for cls in get_mapping_from_secret_type_to_class().values():
        if not issubclass(cls, RegexBasedDetector) or cls.__name__ in _SKIP_PLUGINS:
            continue
        gates, lower, need = _DS_GATES.get(cls.__name__, ((), False, False))
        for rx in cls().denylist:
            out.append(Rule(cls.__name__, re.compile(rx.pattern, rx.flags | re.M), 1 if rx.groups else 0,
                            gates, lower, need))
    return tuple(out)
