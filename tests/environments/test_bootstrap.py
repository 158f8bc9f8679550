import pytest

from obsspec.environments.bootstrap import bootstrap_tag, debian_mirror
from obsspec.environments.errors import ImageBuildError


def apt_dir(tmp_path, sources_list: str = "", extra: dict[str, str] | None = None):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(sources_list)
    for name, text in (extra or {}).items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    return tmp_path


def test_deb822_sources_skip_security_archive(tmp_path):
    text = (
        "Types: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb deb-src\nURIs: http://mirror.example/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert debian_mirror(apt_dir(tmp_path, extra={"debian.sources": text})) == (
        "http://mirror.example/debian"
    )


def test_one_line_sources_with_options(tmp_path):
    text = (
        "# comment\ndeb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"
    )
    assert debian_mirror(apt_dir(tmp_path, text)) == "http://mirror.example/debian"


def test_disabled_and_missing_sources_are_an_error(tmp_path):
    text = "Types: deb\nURIs: http://m.example/debian\nSuites: bookworm\nEnabled: no\n"
    with pytest.raises(ImageBuildError, match="no Debian archive"):
        debian_mirror(apt_dir(tmp_path, extra={"x.sources": text, "y.list.disabled": "deb a b"}))


def test_bootstrap_tag_depends_on_mirror_and_suite():
    a = bootstrap_tag("http://a/debian", "bookworm")
    assert a == bootstrap_tag("http://a/debian", "bookworm")
    assert a != bootstrap_tag("http://b/debian", "bookworm")
    assert a.startswith("obsspec/bootstrap:bookworm-")
