"""nrtpy's documented API on the simulator, against examples/allreduce_1nc.neff (output =
input: a one-rank all-reduce) and examples/allreduce_2nc.neff (output = 2 x input on each of
its two NeuronCores). Expected values are the input file's, as cli/tests/run_cli.rs checks."""

import gc
import json
import os
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import nrtpy
from nrtpy import BenchmarkResult, NrtError, NrtpyError, NrtpyModel, NrtpyTensor, NrtTensor


def input_array(examples):
    return np.fromfile(examples / "input_32xf32.bin", dtype="<f4").reshape(1, 32)


def load_1nc(examples, **kw):
    return NrtpyModel.load_from_neff(examples / "allreduce_1nc.neff", **kw)


# ------------------------------------------------------------------ the documented flow


def test_load_run_check_outputs(examples):
    model = load_1nc(examples)
    assert model.name == "allreduce_1nc"
    assert list(model.input_tensors_info) == ["input"]
    assert list(model.output_tensors_info) == ["output"]
    info = model.input_tensors_info["input"]
    assert (info.shape, info.size, info.dtype) == ([1, 32], 128, np.dtype(np.float32))
    x = input_array(examples)
    t = NrtpyTensor.from_numpy(x, name="input")
    assert (t.shape, t.dtype, t.name) == ((1, 32), np.dtype(np.float32), "input")
    outputs = model(inputs={"input": t})
    assert list(outputs) == ["output"]
    out = outputs["output"]
    assert isinstance(out, NrtpyTensor)
    assert (out.shape, out.dtype, out.name) == ((1, 32), np.dtype(np.float32), "output")
    got = out.numpy()
    assert got.dtype == np.float32 and got.shape == (1, 32)
    np.testing.assert_array_equal(got, x)


def test_name_defaults_to_the_file_stem_and_can_be_given(examples):
    assert load_1nc(examples, name="mine").name == "mine"
    assert NrtpyModel.load_from_neff(str(examples / "allreduce_1nc.neff")).name == "allreduce_1nc"


def test_preallocated_outputs_are_filled_and_none_is_returned(examples):
    model = load_1nc(examples)
    x = input_array(examples)
    out = NrtpyTensor.from_numpy(np.zeros((1, 32), np.float32), name="output")
    assert model(inputs={"input": NrtpyTensor.from_numpy(x, name="input")}, outputs={"output": out}) is None
    np.testing.assert_array_equal(out.numpy(), x)


def test_write_from_numpy_in_place_and_run_again(examples):
    model = load_1nc(examples)
    t = NrtpyTensor.from_numpy(input_array(examples), name="input")
    ref = t.tensor_ref
    y = np.arange(32, dtype=np.float32).reshape(1, 32) * -3.5
    t.write_from_numpy(y)
    assert t.tensor_ref is ref, "no reallocation"
    np.testing.assert_array_equal(t.numpy(), y)
    np.testing.assert_array_equal(model(inputs={"input": t})["output"].numpy(), y)
    with pytest.raises(ValueError):
        t.write_from_numpy(np.zeros(31, np.float32))


def test_non_contiguous_arrays_are_made_contiguous(examples):
    model = load_1nc(examples)
    base = np.arange(64, dtype=np.float32).reshape(2, 32)
    view = base[::2]  # every other row: not C-contiguous as a whole array of the base
    fortran = np.asfortranarray(np.arange(32, dtype=np.float32).reshape(4, 8))
    t = NrtpyTensor.from_numpy(view, name="input")
    np.testing.assert_array_equal(model(inputs={"input": t})["output"].numpy(), base[:1])
    t.write_from_numpy(fortran[:, ::1])
    np.testing.assert_array_equal(t.numpy().reshape(4, 8), fortran)
    reversed_row = input_array(examples)[:, ::-1]
    t.write_from_numpy(reversed_row)
    np.testing.assert_array_equal(t.numpy(), reversed_row)


def test_benchmark_in_both_modes(examples):
    model = load_1nc(examples)
    inputs = {"input": NrtpyTensor.from_numpy(input_array(examples), name="input")}
    for mode in ("device", "host"):
        r = model.benchmark(inputs, warmup_iter=3, benchmark_iter=20, mode=mode)
        assert isinstance(r, BenchmarkResult)
        assert r.iterations == 20 and len(r.durations_ms) == 20 and r.warmup_iterations == 3
        assert all(d > 0 for d in r.durations_ms)
        assert r.min_ms == min(r.durations_ms) and r.max_ms == max(r.durations_ms)
        assert r.min_ms <= r.mean_ms <= r.max_ms
        assert r.mean_ms == pytest.approx(float(np.mean(r.durations_ms)))
        assert r.std_dev_ms == pytest.approx(float(np.std(r.durations_ms)))
        print(f"{mode}: mean {r.mean_ms:.4f} ms, min {r.min_ms:.4f}, max {r.max_ms:.4f}, std {r.std_dev_ms:.4f}")
    # The defaults: device mode, 5 + 5 iterations, outputs allocated.
    r = model.benchmark(inputs)
    assert (r.iterations, r.warmup_iterations) == (5, 5)


def test_benchmark_argument_errors(examples):
    model = load_1nc(examples)
    inputs = {"input": NrtpyTensor.from_numpy(input_array(examples), name="input")}
    with pytest.raises(ValueError):
        model.benchmark(inputs, mode="wall")
    with pytest.raises(ValueError):
        model.benchmark(inputs, benchmark_iter=0)


def test_device_times_are_the_traced_device_spans(examples, tmp_path):
    """Device mode reports the runtime's own device time of each execution (the NC's
    earliest engine START to latest END notification): for a traced execution it is the span
    the trace's engine events cover, within 1 %."""
    model = load_1nc(examples)
    x = NrtpyTensor.from_numpy(input_array(examples), name="input")
    out = NrtTensor.allocate("output", 128, 0)
    for i in range(3):
        path = tmp_path / f"{i}.ntff"
        host_ns, device_ns = model._ref.execute([("input", x.tensor_ref)], [("output", out)], str(path))
        doc = json.loads(path.read_text())
        engines = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "device_exec"]
        assert engines, doc
        span_ns = (max(e["ts"] + e["dur"] for e in engines) - min(e["ts"] for e in engines)) * 1e3
        print(f"execution {i}: host {host_ns} ns, device {device_ns} ns, traced engine span {span_ns:.0f} ns")
        assert device_ns > 0 and host_ns > 0
        assert device_ns == pytest.approx(span_ns, rel=0.01)
    r = model.benchmark({"input": x}, outputs={"output": NrtpyTensor(out, (1, 32), np.float32)}, warmup_iter=0)
    assert all(d > 0 for d in r.durations_ms)


def test_device_mode_times_the_system_traces_nc_exec_running_pairs(examples):
    """Device mode's durations are the system trace's nc_exec_running spans (stop − start of
    data.nc_timestamp_ns): one pair per execution of a one-core model, each within 1 % of the
    runtime's own device timing of that execution."""
    model = load_1nc(examples)
    x = NrtpyTensor.from_numpy(input_array(examples), name="input")
    out = NrtTensor.allocate("output", 128, 0)
    host, device, spans = model._ref.execute_timed([("input", x.tensor_ref)], [("output", out)], 2, 20, True)
    assert len(host) == len(device) == len(spans) == 20
    for h, d, s in zip(host, device, spans):
        assert d > 0 and h > 0
        assert s == pytest.approx(d, rel=0.01)
    print(f"nc_exec_running spans (ns): {spans[:5]} ...; runtime device ns: {device[:5]} ...")
    # Host mode records nothing (no tracing overhead).
    assert model._ref.execute_timed([("input", x.tensor_ref)], [("output", out)], 0, 3, False)[2] == []


def test_save_trace_defaults_next_to_the_neff(examples, tmp_path):
    neff = tmp_path / "copy.neff"
    neff.write_bytes((examples / "allreduce_1nc.neff").read_bytes())
    model = NrtpyModel.load_from_neff(neff)
    model(inputs={"input": NrtpyTensor.from_numpy(input_array(examples), name="input")}, save_trace=True)
    doc = json.loads((tmp_path / "copy.ntff").read_text())
    assert any(e.get("ph") == "X" for e in doc["traceEvents"])


# ------------------------------------------------------------------ dtypes


def test_bfloat16_through_ml_dtypes():
    x = np.array([[1.5, -2.25, 3.0e3, 0.0]], dtype=ml_dtypes.bfloat16)
    t = NrtpyTensor.from_numpy(x, name="bf16")
    assert t.dtype == np.dtype(ml_dtypes.bfloat16) and t.size == 8
    back = t.numpy()
    assert back.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(back.astype(np.float32), x.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint16, np.int32, np.int64, np.float64, np.bool_])
def test_dtypes_round_trip(dtype):
    x = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    t = NrtpyTensor.from_numpy(x)
    back = t.numpy()
    assert back.dtype == np.dtype(dtype) and back.shape == (2, 3, 4)
    np.testing.assert_array_equal(back, x)


def test_tensor_constructor_and_views():
    ref = NrtTensor.allocate("raw", 16, 0)
    t = NrtpyTensor(ref, 4, np.float32, name="raw")
    assert t.shape == (4,)
    np.testing.assert_array_equal(t.numpy(), np.zeros(4, np.float32))  # memory reaches a new owner zeroed
    with pytest.raises(ValueError):
        NrtpyTensor(ref, (3,), np.float32)
    with pytest.raises(TypeError):
        NrtpyTensor(object(), 4, np.float32)


# ------------------------------------------------------------------ errors


def test_a_missing_neff_is_an_nrt_error():
    with pytest.raises(NrtError) as e:
        NrtpyModel.load_from_neff("nonexistent.neff")
    assert e.value.status == 1 and e.value.status_name == "NRT_FAILURE"
    assert str(e.value).startswith("NRT Error NRT_FAILURE(1): ")
    assert isinstance(e.value, RuntimeError)


def test_a_file_that_is_no_neff_is_refused_with_the_runtime_status(repo):
    with pytest.raises(NrtError) as e:
        NrtpyModel.load_from_neff(repo / "Cargo.toml")
    assert e.value.status_name == "NRT_INVALID", e.value


def test_input_name_mismatches(examples):
    model = load_1nc(examples)
    t = NrtpyTensor.from_numpy(input_array(examples), name="input")
    with pytest.raises(NrtError) as e:
        model(inputs={})
    assert (e.value.status, e.value.status_name) == (1002, "NRT_EXEC_BAD_INPUT")
    with pytest.raises(NrtError) as e:
        model(inputs={"input": t, "nope": t})
    assert e.value.status_name == "NRT_INVALID" and "nope" in str(e.value)
    with pytest.raises(TypeError):
        model(inputs={"input": np.zeros((1, 32), np.float32)})


def test_an_execution_fault_raises_its_status(examples, monkeypatch):
    # A simulated uncorrectable HBM error on NC 0, armed when the runtime opens (as libnrt.so
    # arms NEURON_VFIO_SIM_FAULT at nrt_init).
    monkeypatch.setenv("NEURON_VFIO_SIM_FAULT", "hbm-ue@nc0")
    monkeypatch.setenv("NEURON_RT_EXEC_TIMEOUT", "1")
    model = load_1nc(examples)
    t = NrtpyTensor.from_numpy(input_array(examples), name="input")
    with pytest.raises(NrtError) as e:
        model(inputs={"input": t})
    assert (e.value.status, e.value.status_name) == (1201, "NRT_EXEC_HW_ERR_HBM_UE")
    assert str(e.value).startswith("NRT Error NRT_EXEC_HW_ERR_HBM_UE(1201): Failed to execute model")
    with pytest.raises(RuntimeError):
        model.benchmark({"input": t}, warmup_iter=0, benchmark_iter=1)


def test_a_core_that_is_not_visible_is_an_nrt_error():
    nrtpy.configure(visible_cores=[0])
    with pytest.raises(NrtError) as e:
        NrtTensor.allocate("x", 4, 5)
    assert e.value.status_name == "NRT_INVALID", e.value


# ------------------------------------------------------------------ configure / reset


def test_configure_checks_its_argument():
    with pytest.raises(TypeError):
        nrtpy.configure(visible_cores=1)
    with pytest.raises(TypeError):
        nrtpy.configure(visible_cores=[0, "1"])
    with pytest.raises(ValueError):
        nrtpy.configure(visible_cores=[0, -1])
    nrtpy.configure(visible_cores=None)
    nrtpy.configure(visible_cores=range(2))
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "0,1"


def test_configure_selects_cores_and_reset_restores(examples, monkeypatch):
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    nrtpy.configure(visible_cores=[1])
    model = load_1nc(examples)
    assert model._ref.ncs == [0] and model._ref.global_ncs == [1]
    x = input_array(examples)
    np.testing.assert_array_equal(model(inputs={"input": NrtpyTensor.from_numpy(x, name="input")})["output"].numpy(), x)
    with pytest.raises(NrtpyError):
        nrtpy.configure(visible_cores=[0])
    with pytest.raises(RuntimeError):
        nrtpy.configure(visible_cores=[0])
    nrtpy.reset()
    assert "NEURON_RT_VISIBLE_CORES" not in os.environ
    assert load_1nc(examples)._ref.global_ncs == [0]


def test_objects_of_a_reset_runtime_raise_nrtpy_error(examples):
    model = load_1nc(examples)
    t = NrtpyTensor.from_numpy(input_array(examples), name="input")
    nrtpy.reset()
    nrtpy.reset()  # a no-op when not open
    with pytest.raises(NrtpyError):
        t.numpy()
    with pytest.raises(NrtpyError):
        model(inputs={"input": t})
    assert t.tensor_ref.freed
    del model, t
    gc.collect()


def test_free_tensor(examples):
    t = NrtpyTensor.from_numpy(input_array(examples), name="input")
    nrtpy.get_nrtpy_singleton().free_tensor(t)
    with pytest.raises(NrtpyError):
        t.numpy()
    with pytest.raises(NrtpyError):
        t.write_from_numpy(input_array(examples))


def test_models_unload_when_collected(examples):
    for _ in range(3):
        model = load_1nc(examples)
        del model
        gc.collect()
    model = load_1nc(examples)
    assert model(inputs={"input": NrtpyTensor.from_numpy(input_array(examples), name="input")})


# ------------------------------------------------------------------ two NeuronCores, collectives


def test_a_two_core_allreduce_with_tensors_on_each_core(examples, monkeypatch):
    monkeypatch.setenv("NEURON_VFIO_DEVICE", "sim:cayman")
    # An LNC=1 NEFF: Trn2's default is LNC=2.
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    nrtpy.configure(visible_cores=[0, 1])
    model = NrtpyModel.load_from_neff(examples / "allreduce_2nc.neff", cc_enabled=True)
    assert model._ref.ncs == [0, 1]
    x = input_array(examples)
    out = model(inputs={"input": NrtpyTensor.from_numpy(x, name="input")})["output"].numpy()
    np.testing.assert_array_equal(out, 2 * x)
    r = model.benchmark(inputs={"input": NrtpyTensor.from_numpy(x, name="input")}, warmup_iter=1, benchmark_iter=4)
    assert r.iterations == 8, "one nc_exec_running pair per NeuronCore and execution"
    assert model.benchmark(inputs={"input": NrtpyTensor.from_numpy(x)}, benchmark_iter=4, mode="host").iterations == 4
    t1 = NrtpyTensor.from_numpy(x, name="core1_input", core_id=1)
    assert t1.core_id == 1
    np.testing.assert_array_equal(t1.numpy(), x)
    with pytest.raises(NrtError) as e:
        NrtpyModel.load_from_neff(examples / "allreduce_2nc.neff", cc_enabled=True, rank_id=1, world_size=2)
    assert e.value.status_name == "NRT_INVALID"
    with pytest.raises(ValueError):
        NrtpyModel.load_from_neff(examples / "allreduce_2nc.neff", rank_id=2, world_size=2)


def test_an_lnc2_neff_on_one_logical_core_at_trn2s_default(examples, monkeypatch):
    monkeypatch.setenv("NEURON_VFIO_DEVICE", "sim:cayman")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    monkeypatch.delenv("NEURON_RT_VIRTUAL_CORE_SIZE", raising=False)
    nrtpy.configure(visible_cores=[1])
    model = NrtpyModel.load_from_neff(examples / "allreduce_lnc2.neff")
    assert model._ref.ncs == [0], "one logical core: the process's first visible one"
    assert model._ref.global_ncs == [2, 3], "logical core 1 is physical cores 2-3"
    x = input_array(examples)
    out = model(inputs={"input": NrtpyTensor.from_numpy(x, name="input")})["output"].numpy()
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(NrtError) as e:
        NrtpyModel.load_from_neff(examples / "allreduce_1nc.neff")
    assert e.value.status_name == "NRT_INVALID"


# ------------------------------------------------------------------ docs/python.md


def test_the_first_script_of_docs_python_md_runs_unchanged(repo):
    text = (repo / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/python.md has no python block"
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", blocks[0]], cwd=repo, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    assert "outputs match" in out.stdout
