"""The command line and Python API follow their ecosystem's conventions: checked choices
with a did-you-mean, usage errors for missing directories, exit codes scripts can trust,
text streams, a typed package, Jupyter display."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner

import oomdoctor
from oomdoctor.cli import main

EXAMPLE = Path(__file__).parent / "fixtures" / "logs" / "example-zero3-save.log"
NCCL_TIMEOUT = ("[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 0] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600003 "
                "milliseconds before timing out.\n")


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


@pytest.mark.parametrize("name,knob", [("LLaMA_Factory", "llamafactory"), ("HF", "hf"), ("Axolotl", "axolotl")])
def test_framework_names_are_case_insensitive_with_aliases(name: str, knob: str):
    res = run("diagnose", str(EXAMPLE), "--framework", name, "-f", "json")
    assert res.exit_code == 1, res.output
    import json
    top = json.loads(res.output)["diagnoses"][0]["remediations"][0]
    assert top["knob"]["framework"] == knob


def test_an_unknown_framework_is_a_usage_error_with_a_suggestion():
    res = run("diagnose", str(EXAMPLE), "--framework", "axolotol")
    assert res.exit_code == 2
    assert "Did you mean 'axolotl'?" in res.output


def test_a_missing_kb_directory_is_a_usage_error(tmp_path: Path):
    res = run("diagnose", str(EXAMPLE), "--kb", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "does not exist" in res.output


def test_format_is_case_insensitive():
    res = run("diagnose", str(EXAMPLE), "-f", "JSON")
    assert res.exit_code == 1 and res.output.lstrip().startswith("{")


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_names_python_and_the_speed_ups(flag: str):
    res = run(flag)
    assert res.exit_code == 0
    assert res.output.startswith(f"oomdoctor {oomdoctor.__version__} (Python ")
    assert "Hyperscan prefilter:" in res.output


def test_a_failure_that_is_not_memory_exits_1():
    res = run("diagnose", "-", input=NCCL_TIMEOUT)
    assert res.exit_code == 1, res.output
    assert res.output.startswith("Not an out-of-memory failure")


def test_a_warning_alone_exits_0():
    res = run("diagnose", "-", input="[INFO] [axolotl.callbacks.on_step_end:122] [PID:1] [RANK:0] GPU memory usage "
                                     "while training: 13.270GB (+56.066GB cache, +1.374GB misc)\n")
    assert res.exit_code == 0 and res.output.startswith("Warning, no failure:")


def test_diagnose_reads_text_streams():
    text = EXAMPLE.read_text(encoding="utf-8")
    assert oomdoctor.diagnose(io.StringIO(text)).top.incident == "ckpt-save-gather"
    with open(EXAMPLE, encoding="utf-8") as fh:
        assert oomdoctor.diagnose(fh).top.incident == "ckpt-save-gather"


@pytest.mark.parametrize("bad", [42, 3.5, ["job.log"], None])
def test_diagnose_refuses_other_types(bad):
    with pytest.raises(TypeError):
        oomdoctor.diagnose(bad)


def test_reports_render_themselves_for_notebooks():
    report = oomdoctor.diagnose(str(EXAMPLE))
    assert report.to_text().startswith("OOM: ")
    assert len(report.to_text(verbose=True)) > len(report.to_text())
    assert report._repr_markdown_() == report.to_markdown() and report.to_markdown().startswith("## ")


def test_the_package_is_typed_and_licensed():
    package = Path(oomdoctor.__file__).parent
    assert (package / "py.typed").is_file()
    assert oomdoctor.diagnose.__annotations__["return"] == "Report"
    license = Path(__file__).resolve().parents[1] / "LICENSE"
    assert license.read_text(encoding="utf-8").startswith("Apache License")


def test_reports_validate_against_the_printed_schema():
    """`oomdoctor schema` describes what `diagnose -f json` writes, every field required."""
    import json

    import jsonschema

    res = run("schema")
    schema = json.loads(res.output)
    assert schema["$schema"].endswith("2020-12/schema") and schema["$id"].startswith("urn:oomdoctor:")
    assert {"diagnoses", "oom_events", "environment", "phase", "schema_version"} <= set(schema["required"])
    logs = [EXAMPLE, *sorted((Path(__file__).parent / "fixtures" / "real").glob("*.log"))[:40]]
    for log in logs:
        jsonschema.validate(json.loads(oomdoctor.diagnose(str(log)).model_dump_json()), schema)
    with pytest.raises(jsonschema.ValidationError):
        broken = json.loads(oomdoctor.diagnose(str(EXAMPLE)).model_dump_json())
        del broken["diagnoses"]
        jsonschema.validate(broken, schema)


@pytest.mark.parametrize("command", [["diagnose"], ["scan"], ["summarize"], ["run"], ["schema"], ["kb", "list"],
                                     ["kb", "show"], ["kb", "lint"], ["kb", "docs"], ["kb", "facts"]])
def test_every_command_says_its_exit_codes_under_help(command):
    from click.testing import CliRunner

    from oomdoctor.cli import main
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0
    assert "Exit code:" in result.output


def test_diagnose_takes_a_bytearray_like_bytes():
    import oomdoctor
    log = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert oomdoctor.diagnose(bytearray(log)).model_dump() == oomdoctor.diagnose(log).model_dump()
