"""Settings, projects and evaluation inputs that used to end in a traceback: each is now
one line naming what is wrong, where it came from and how to fix it."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import isotope
from isotope import projects
from isotope.cli import app
from isotope.errors import IsotopeError, SettingsError
from isotope.search import evaluation
from isotope.settings import Settings, resolve

runner = CliRunner()
SRC = Path(isotope.__file__).resolve().parents[1]


def _isotope(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``isotope ARGS`` as a fresh process, with this checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "isotope", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    return stderr


# -- 1. non-finite and absurd numbers -------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300", "Infinity"])
def test_max_file_mb_refuses_non_finite_and_absurd_sizes(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOTOPE_MAX_FILE_MB", value)
    with pytest.raises(SettingsError, match=r"max_file_mb = .* \(from \$ISOTOPE_MAX_FILE_MB\)"):
        resolve(None)
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 1
    assert "max_file_mb" in _one_line(result.stderr)


def test_a_large_but_sane_max_file_mb_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOTOPE_MAX_FILE_MB", "4096")
    assert resolve(None)[0].max_file_mb == 4096


FLOATS = [name for name, field in Settings.model_fields.items()
          if "float" in str(field.annotation) and "dict" not in str(field.annotation)]


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_every_float_setting_refuses_inf_and_nan(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"ISOTOPE_{name.upper()}", value)
    with pytest.raises(SettingsError, match=rf"{name} = .* \(from \$ISOTOPE_{name.upper()}\)"):
        resolve(None)
    with pytest.raises(SettingsError, match=rf"{name} = .* \(from argument\)"):
        resolve(None, **{name: float(value)})


def test_dedup_threshold_is_a_cosine_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("1.5", "-2", "nan"):
        monkeypatch.setenv("ISOTOPE_DEDUP_THRESHOLD", bad)
        with pytest.raises(SettingsError, match="dedup_threshold"):
            resolve(None)
    for good, expected in (("0.9", 0.9), ("-1", -1.0), ("off", None), ("none", None)):
        monkeypatch.setenv("ISOTOPE_DEDUP_THRESHOLD", good)
        assert resolve(None)[0].dedup_threshold == expected


@pytest.mark.parametrize("weights", ['{"questions-bm25": -1}', '{"questions-bm25": 1e9}',
                                     '{"questions-bm25": NaN}', '{"questions-bm25": Infinity}'])
def test_weights_refuse_negative_non_finite_and_absurd_values(
    weights: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOTOPE_WEIGHTS", weights)
    with pytest.raises(SettingsError) as caught:
        resolve(None)
    assert "weights.questions-bm25" in str(caught.value)
    assert "(from $ISOTOPE_WEIGHTS)" in str(caught.value)
    with pytest.raises(SettingsError, match=r"weights\.x = .* \(from argument\)"):
        resolve(None, weights={"x": -0.5})


def test_weights_that_are_not_json_are_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOTOPE_WEIGHTS", "questions-bm25=0.5")
    with pytest.raises(SettingsError, match=r"weights .*\$ISOTOPE_WEIGHTS"):
        resolve(None)
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 1 and "ISOTOPE_WEIGHTS" in _one_line(result.stderr)
    monkeypatch.setenv("ISOTOPE_WEIGHTS", '{"questions-bm25": 0.5, "chunks-dense": 0}')
    assert resolve(None)[0].weights == {"questions-bm25": 0.5, "chunks-dense": 0.0}


# -- 2. list settings from the environment --------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    ("*.pdf", ["*.pdf"]),
    ("*.pdf, build/**,**/*.tmp", ["*.pdf", "build/**", "**/*.tmp"]),
    ('["*.pdf", "a,b"]', ["*.pdf", "a,b"]),
    ("", []),
])
def test_exclude_and_include_take_a_json_list_or_comma_separated_globs(
    raw: str, expected: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ISOTOPE_EXCLUDE", raw)
    assert resolve(None)[0].exclude == expected
    (tmp_path / ".env").write_text(f"ISOTOPE_INCLUDE='{raw}'\n")
    settings, origins = resolve(None)
    assert settings.include == expected and origins["include"] == ".env"
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["exclude"] == {"value": expected, "from": "env",
                                                  "group": "chunking"}


def test_a_broken_json_list_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOTOPE_EXCLUDE", '["*.pdf"')
    with pytest.raises(SettingsError, match=r"exclude = .* \(from \$ISOTOPE_EXCLUDE\)"):
        resolve(None)
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 1 and "ISOTOPE_EXCLUDE" in _one_line(result.stderr)


def test_a_plain_glob_in_the_environment_works_from_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOTOPE_EXCLUDE", "*.pdf")
    done = _isotope("config", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["exclude"]["value"] == ["*.pdf"]


# -- 3. a .env file that is not UTF-8 -------------------------------------------------

def test_a_utf16_env_file_is_one_line_saying_to_save_it_as_utf8(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes("ISOTOPE_TOP_K=7\n".encode("utf-16"))
    with pytest.raises(SettingsError, match=r"^\.env is not UTF-8 text \(.*\): save it as UTF-8"):
        resolve(None)
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 1
    assert ".env is not UTF-8 text" in _one_line(result.stderr)


def test_a_utf8_env_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes("ISOTOPE_TOP_K=7\n".encode("utf-8-sig"))
    settings, origins = resolve(None)
    assert settings.top_k == 7 and origins["top_k"] == ".env"


def test_an_edited_env_file_is_read_again(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("ISOTOPE_TOP_K=7\n")
    assert resolve(None)[0].top_k == 7
    env.write_text("ISOTOPE_TOP_K=11\n")
    assert resolve(None)[0].top_k == 11
    env.unlink()
    settings, origins = resolve(None)
    assert settings.top_k == 5 and origins["top_k"] == "default"


# -- 4. one warning per bad .env line -------------------------------------------------

BAD_ENV = "# settings\nISOTOPE_TOP_K=7\nISOTOPE_ALPHA=0.4\n'unclosed = x\nISOTOPE_CACHE=false\n"


def test_a_bad_env_line_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ".env").write_text(BAD_ENV)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            settings, origins = resolve(None)
    warnings = [r for r in caplog.records if "could not parse" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "line 4" in warnings[0].getMessage()
    assert settings.top_k == 7 and settings.cache is False and origins["alpha"] == ".env"


def test_a_bad_env_line_is_warned_about_once_per_command(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(BAD_ENV)
    done = _isotope("config", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("could not parse") == 1, done.stderr


# -- 5. a project named "default" -----------------------------------------------------

def test_a_project_named_default_then_another_made_the_default() -> None:
    assert runner.invoke(app, ["project", "create", "default"]).exit_code == 0
    made = runner.invoke(app, ["project", "create", "foo", "--use"])
    assert made.exit_code == 0, made.output
    assert projects.default() == "foo"
    listed = json.loads(runner.invoke(app, ["project", "list", "--json"]).stdout)
    assert {p["name"]: p["is_default"] for p in listed} == {"default": False, "foo": True}
    assert runner.invoke(app, ["project", "use", "default"]).exit_code == 0
    assert projects.default() == "default"


def test_a_default_project_then_one_named_default() -> None:
    assert runner.invoke(app, ["project", "create", "foo", "--use"]).exit_code == 0
    made = runner.invoke(app, ["project", "create", "default"])
    assert made.exit_code == 0, made.output
    assert projects.default() == "foo" and projects.exists("default")
    assert runner.invoke(app, ["project", "delete", "foo", "--yes"]).exit_code == 0
    assert projects.default() is None and projects.exists("default")


def test_the_default_chosen_before_the_pointer_moved_is_still_the_default(
    tmp_path: Path,
) -> None:
    assert runner.invoke(app, ["project", "create", "foo"]).exit_code == 0
    (tmp_path / "projects" / "default").write_text("foo\n")  # written by earlier versions
    assert projects.default() == "foo"
    made = runner.invoke(app, ["project", "create", "default"])
    assert made.exit_code == 0, made.output
    assert projects.default() == "foo" and projects.exists("default")


# -- 6. a project folder that is a symbolic link --------------------------------------

def test_deleting_a_linked_project_removes_the_link_and_keeps_the_folder(
    tmp_path: Path,
) -> None:
    assert runner.invoke(app, ["project", "create", "docs"]).exit_code == 0
    elsewhere = tmp_path / "elsewhere" / "docs"
    elsewhere.parent.mkdir()
    link = tmp_path / "projects" / "docs"
    link.rename(elsewhere)
    link.symlink_to(elsewhere, target_is_directory=True)
    assert projects.exists("docs")

    deleted = projects.delete("docs")
    assert deleted.path == link and deleted.kept == elsewhere
    assert "left in place" in deleted.message() and str(elsewhere) in deleted.message()
    assert not link.is_symlink() and not link.exists()
    assert (elsewhere / "isotope.db").is_file() or any(elsewhere.iterdir())
    assert not projects.exists("docs")
    assert runner.invoke(app, ["project", "list", "--json"]).stdout.strip() == "[]"


def test_deleting_a_linked_project_from_the_cli(tmp_path: Path) -> None:
    assert runner.invoke(app, ["project", "create", "docs"]).exit_code == 0
    elsewhere = tmp_path / "kept"
    link = tmp_path / "projects" / "docs"
    link.rename(elsewhere)
    link.symlink_to(elsewhere, target_is_directory=True)
    result = runner.invoke(app, ["project", "delete", "docs", "--yes"])
    assert result.exit_code == 0, result.output
    assert not link.is_symlink() and elsewhere.is_dir()
    assert f"{elsewhere}, was left in place" in " ".join(result.output.split())


def test_deleting_a_plain_project_removes_its_folder(tmp_path: Path) -> None:
    assert runner.invoke(app, ["project", "create", "docs"]).exit_code == 0
    deleted = projects.delete("docs")
    assert deleted.kept is None and not deleted.path.exists()
    assert deleted.message() == f"deleted project docs ({deleted.path})"


# -- 7. evaluation inputs -------------------------------------------------------------

def test_eval_of_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"question": "Why?", "gold_pid": "1"}\n')
    missing = tmp_path / "nonexistent.jsonl"
    result = runner.invoke(app, ["eval", str(missing), str(queries)])
    assert result.exit_code == 1, result.output
    assert str(missing) in _one_line(result.stderr) and "no such file" in result.stderr
    with pytest.raises(IsotopeError, match=r"nonexistent\.jsonl: no such file"):
        evaluation.load(missing, queries)
    with pytest.raises(IsotopeError, match="is a folder"):
        evaluation.load(tmp_path, queries)


def test_eval_of_a_line_that_is_not_json_names_the_file_and_line(tmp_path: Path) -> None:
    passages = tmp_path / "p.jsonl"
    passages.write_text('{"pid": "1", "text": "Robots."}\n\n{"pid": 2, text: "x"}\n')
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"question": "Why?", "gold_pid": "1"}\n')
    where = re.escape(str(passages))
    with pytest.raises(IsotopeError, match=rf"^{where}:3: not JSON .*one JSON object"):
        evaluation.load(passages, queries)
    result = runner.invoke(app, ["eval", str(passages), str(queries)])
    assert result.exit_code == 1 and f"{passages}:3" in _one_line(result.stderr)


@pytest.mark.parametrize(("line", "problem"), [
    ('["1", "Robots."]', "not a JSON object"),
    ("42", "not a JSON object"),
    ('{"pid": "1", "text": 5}', "text must be a string"),
])
def test_eval_of_a_line_of_the_wrong_shape_names_the_file_and_line(
    line: str, problem: str, tmp_path: Path
) -> None:
    passages = tmp_path / "p.jsonl"
    passages.write_text('{"pid": "0", "text": "Robots."}\n' + line + "\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"question": "Why?", "gold_pid": "0"}\n')
    with pytest.raises(IsotopeError, match=rf"^{re.escape(str(passages))}:2: {problem}"):
        evaluation.load(passages, queries)


def test_eval_of_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    passages = tmp_path / "p.jsonl"
    passages.write_bytes(b'{"pid": "0", "text": "Robots."}\n{"pid": "1", "text": "\xff"}\n')
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"question": "Why?", "gold_pid": "0"}\n')
    with pytest.raises(IsotopeError, match=rf"^{re.escape(str(passages))}:2: not UTF-8"):
        evaluation.load(passages, queries)


# -- 8. packaging ---------------------------------------------------------------------

def test_the_license_is_an_spdx_expression_setuptools_understands() -> None:
    """A TOML table for project.license is deprecated (setuptools warns on every
    install); an SPDX string needs setuptools 77."""
    import tomllib

    pyproject = tomllib.loads((SRC.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in pyproject["build-system"]["requires"]
    # NoDecode, which the list settings use, came in pydantic-settings 2.7
    assert any(d.replace(" ", "").startswith("pydantic-settings>=2.7")
               for d in pyproject["project"]["dependencies"])


@pytest.mark.parametrize("name, value", [
    ("llm_context", "99999999999999999999"), ("top_k", "10001"), ("threads", "100000"),
    ("chunk_size", "10000000"), ("answer_k", "1000"),
])
def test_absurd_whole_numbers_are_refused(monkeypatch: pytest.MonkeyPatch, name: str,
                                          value: str) -> None:
    monkeypatch.setenv(f"ISOTOPE_{name.upper()}", value)
    with pytest.raises(SettingsError, match=rf"{name} = '{value}' \(from \$ISOTOPE_"):
        resolve(None)


@pytest.mark.parametrize("value", ['["/data", "/srv/more"]', "/data,/srv/more",
                                   " /data , /srv/more "])
def test_serve_roots_and_the_server_lists_take_json_or_commas(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    for name in ("SERVE_ROOTS", "ALLOWED_HOSTS", "ALLOWED_ORIGINS"):
        monkeypatch.setenv(f"ISOTOPE_{name}", value)
    settings = Settings()
    assert settings.serve_roots == ["/data", "/srv/more"]
    assert settings.allowed_hosts == settings.allowed_origins == ["/data", "/srv/more"]
    for name in ("SERVE_ROOTS", "ALLOWED_HOSTS", "ALLOWED_ORIGINS"):
        monkeypatch.delenv(f"ISOTOPE_{name}")
    (tmp_path / ".env").write_text(f"ISOTOPE_SERVE_ROOTS={value}\n")
    monkeypatch.chdir(tmp_path)
    assert Settings().serve_roots == ["/data", "/srv/more"]


def test_a_machine_setting_is_refused_by_a_project_not_dropped() -> None:
    made = runner.invoke(app, ["project", "create", "p", "--set", 'serve_roots=["/data"]'])
    assert made.exit_code == 1
    assert "never saved in a project" in made.output and "ISOTOPE_SERVE_ROOTS" in made.output
    assert not projects.exists("p")


@pytest.mark.parametrize("location, secret", [
    ("postgresql://alice:pa?ss@db/x", "pa?ss"),  # a ? in the password (libpq takes it)
    ("postgresql://alice:p/a@ss@db/x?sslmode=require", "p/a@ss"),
    ("postgresql://alice:Secret%25zz@db/x?password=Other", "Other"),
    ("https://user:token123@proxy.example:8080/v1", "token123"),
    ("chroma+http://127.0.0.1:8000/x?token=tk-secret9", "tk-secret9"),  # (no such store)
    ("https://api.example/v1?api_key=k-77zq&x=1", "k-77zq"),
])
def test_a_password_is_masked_whatever_it_holds(location: str, secret: str) -> None:
    from isotope.redaction import mask_location, redact

    assert secret not in mask_location(location) and "***" in mask_location(location)
    assert secret not in redact(f"connection to {location} failed", location)


def test_a_url_the_parser_refuses_is_named_without_any_of_its_password() -> None:
    """A "?" in a password makes the rest of it the query, and the start of it a port the
    URL parser refuses, quoting it: the error must not show that piece either."""
    from isotope.errors import InvalidIndex
    from isotope.stores.postgres_schema import split_location

    with pytest.raises(InvalidIndex, match="is not a valid URL") as refused:
        split_location("postgresql://bob:s3cr3t?x@127.0.0.1:1/db?schema=x")
    assert "s3cr3t" not in str(refused.value) and "Port" in str(refused.value)


def test_every_url_setting_is_shown_without_its_password(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not only the index: a base URL with credentials (a proxy's) is masked in
    `isotope config --json` too."""
    monkeypatch.setenv("ISOTOPE_OPENAI_BASE_URL", "https://u:token123@proxy.example/v1")
    result = runner.invoke(app, ["config", "--json", "--index", str(tmp_path / "i")])
    assert result.exit_code == 0, result.output
    assert "token123" not in result.output and "u:***@proxy.example" in result.output
