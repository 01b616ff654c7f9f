"""Tests of nnrecover.io: exact round trips in every format, memory mapping, streaming writes, errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import nnrecover as nr
from nnrecover import files, io
from nnrecover.errors import InputError

FORMATS = (".npz", ".npy", ".csv", ".parquet")


@pytest.fixture
def data():
    rng = np.random.default_rng(12345)
    # values spanning many magnitudes, so that a lossy text format would be caught
    X = rng.standard_normal((37, 4)) * np.array([1e-12, 1.0, 3e5, -7.0])
    return X, rng.standard_normal(37), rng.standard_normal((37, 3))


def _kw(ext, Y):
    # a .npy file cannot record how many columns are targets (see save_samples Notes)
    return {"target_columns": [-3, -2, -1]} if ext == ".npy" and Y.ndim == 2 else {}


@pytest.mark.parametrize("ext", FORMATS)
@pytest.mark.parametrize("multi", [False, True])
def test_round_trip_is_exact(tmp_path, data, ext, multi):
    X, y1, y3 = data
    Y = y3 if multi else y1
    path = io.save_samples(tmp_path / f"s{ext}", X, Y)
    X2, Y2 = io.load_samples(path, **_kw(ext, Y))
    assert X2.shape == X.shape and Y2.shape == Y.shape
    assert np.array_equal(np.asarray(X2), X) and np.array_equal(np.asarray(Y2), Y)


def test_npy_is_memory_mapped_without_copy(tmp_path, data):
    X, Y, _ = data
    path = io.save_samples(tmp_path / "s.npy", X, Y)
    X2, Y2 = io.load_samples(path)
    for arr in (X2, Y2):
        assert isinstance(arr, np.memmap)
        assert not arr.flags.writeable
        # a view on the file itself, not an in-memory copy
        assert arr.filename is not None and str(arr.filename) == str(path.resolve())
    X3, _ = io.load_samples(path, mmap=False)
    assert not isinstance(X3, np.memmap) and np.array_equal(X3, X)


def test_npy_with_separate_targets_file(tmp_path, data):
    X, _, Y = data
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    X2, Y2 = io.load_samples(tmp_path / "x.npy", targets=tmp_path / "y.npy")
    assert np.array_equal(X2, X) and np.array_equal(Y2, Y)
    # targets as a table: every column is a target unless target_columns picks some
    pd.DataFrame(Y, columns=["a", "b", "c"]).to_csv(tmp_path / "y.csv", index=False, float_format="%.17g")
    _, Yb = io.load_samples(tmp_path / "x.npy", targets=tmp_path / "y.csv", target_columns="b")
    assert np.array_equal(Yb, Y[:, 1])


def test_npy_target_columns_in_the_middle(tmp_path, data):
    X, Y, _ = data
    arr = np.column_stack([X[:, :2], Y, X[:, 2:]])
    np.save(tmp_path / "m.npy", arr)
    X2, Y2 = io.load_samples(tmp_path / "m.npy", target_columns=2)
    assert np.array_equal(X2, X) and np.array_equal(Y2, Y)
    X3, Y3 = io.load_samples(tmp_path / "m.npy", target_columns=["2"])  # as typed on the command line
    assert np.array_equal(X3, X) and np.array_equal(Y3, Y)


def test_csv_target_column_rules(tmp_path, data):
    X, Y, Y3 = data
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    # default: the last column when no column is called y / y0..
    df.assign(label=Y).to_csv(tmp_path / "last.csv", index=False, float_format="%.17g")
    X2, Y2 = io.load_samples(tmp_path / "last.csv")
    assert np.array_equal(X2, X) and np.array_equal(Y2, Y)
    # a column named y anywhere wins over the last column
    pd.concat([pd.Series(Y, name="y"), df], axis=1).to_csv(tmp_path / "y.csv", index=False, float_format="%.17g")
    X2, Y2 = io.load_samples(tmp_path / "y.csv")
    assert np.array_equal(X2, X) and np.array_equal(Y2, Y)
    # y0, y1, y2 in index order even if stored out of order
    df.assign(y2=Y3[:, 2], y0=Y3[:, 0], y1=Y3[:, 1]).to_csv(tmp_path / "yy.csv", index=False, float_format="%.17g")
    X2, Y2 = io.load_samples(tmp_path / "yy.csv")
    assert np.array_equal(X2, X) and np.array_equal(Y2, Y3)
    # explicit names, in the given order
    X2, Y2 = io.load_samples(tmp_path / "yy.csv", target_columns=["y1", "y0"])
    assert np.array_equal(Y2, Y3[:, [1, 0]]) and np.array_equal(X2, np.column_stack([X, Y3[:, 2]]))


def test_csv_without_header(tmp_path, data):
    X, Y, _ = data
    np.savetxt(tmp_path / "plain.csv", np.column_stack([Y, X]), delimiter=",", fmt="%.17g")
    X2, Y2 = io.load_samples(tmp_path / "plain.csv", target_columns=0)
    assert X2.shape == X.shape and np.array_equal(X2, X) and np.array_equal(Y2, Y)
    X3, Y3 = io.load_samples(tmp_path / "plain.csv", target_columns="0")
    assert np.array_equal(X3, X) and np.array_equal(Y3, Y)


def test_npz_custom_keys(tmp_path, data):
    X, Y, _ = data
    np.savez(tmp_path / "k.npz", inputs=X, labels=Y)
    X2, Y2 = io.load_samples(tmp_path / "k.npz", x_key="inputs", y_key="labels")
    assert np.array_equal(X2, X) and np.array_equal(Y2, Y)


@pytest.mark.parametrize("ext", FORMATS)
def test_stream_writer_matches_sample(tmp_path, ext):
    # sample() and sample_stream() give the same rows for the same seed (sampling.py design), so a
    # file written chunk by chunk must equal the in-memory draw exactly.
    net = nr.random_network(3, 2, 2, rng=0)
    dist = nr.distributions.StandardGaussian(3)
    X, Y = nr.sample(net, dist, 1001, rng=7)
    stream = nr.sample_stream(net, dist, 1001, chunk_size=128, rng=7)
    path, rows = io.save_sample_stream(tmp_path / f"s{ext}", stream)
    assert rows == 1001
    X2, Y2 = io.load_samples(path, **({"target_columns": [-2, -1]} if ext == ".npy" else {}))
    assert np.array_equal(np.asarray(X2), X) and np.array_equal(np.asarray(Y2), Y)


def test_stream_to_npy_needs_length(tmp_path):
    chunks = [(np.zeros((2, 3)), np.zeros(2))]
    with pytest.raises(InputError, match="n_samples"):
        io.save_sample_stream(tmp_path / "s.npy", iter(chunks))
    with pytest.raises(InputError, match="held 2 rows"):
        io.save_sample_stream(tmp_path / "s.npy", iter(chunks), n_samples=5)


@pytest.mark.parametrize("ext", FORMATS)
def test_stream_writer_validates_every_chunk(tmp_path, ext):
    good = (np.zeros((2, 3)), np.zeros(2))
    kw = {"n_samples": 4} if ext == ".npy" else {}
    for chunks, match in [([good, (np.zeros((2, 4)), np.zeros(2))], "chunk 1 has 4 input"),
                          ([good, (np.zeros((2, 3)), np.zeros((2, 2)))], "chunk 1 has 3 input and 2 target"),
                          ([good, (np.zeros((2, 3)), None)], "chunk 1 has 3 input and 0 target"),
                          ([good, (np.full((2, 3), np.nan), np.zeros(2))], r"X \(chunk 1\) contains 6 NaN"),
                          ([good, (np.zeros((2, 3)), np.zeros(3))], "different numbers of samples"),
                          ([good, np.zeros((2, 3))], "item 1 of the sample stream is a ndarray"),
                          ("abc", "iterable of \\(X, Y\\) pairs"), ([], "empty")]:
        with pytest.raises(InputError, match=match):
            io.save_sample_stream(tmp_path / f"bad{ext}", chunks, **kw)
    # 1-D targets stay 1-D through .npz; chunks without targets write inputs only
    path, rows = io.save_sample_stream(tmp_path / f"ok{ext}", [good, good], **kw)
    assert rows == 4
    if ext == ".npz":
        with np.load(path) as f:
            assert f["Y"].shape == (4,)
        path, _ = io.save_sample_stream(tmp_path / "x.npz", [(np.ones((2, 3)), None)] * 2)
        with np.load(path) as f:
            assert f.files == ["X"] and f["X"].shape == (4, 3)


# ------------------------------------------------------------------------------------------ errors
def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        io.load_samples(tmp_path / "nope.npz")
    (tmp_path / "a.txt").write_text("1,2\n")
    with pytest.raises(InputError, match=r"\.npz, \.npy, \.csv, \.parquet"):
        io.load_samples(tmp_path / "a.txt")
    with pytest.raises(InputError, match="directory"):
        io.load_samples(tmp_path)
    with pytest.raises(InputError, match="cannot write"):
        io.save_samples(tmp_path / "a.txt", np.zeros((2, 2)), np.zeros(2))


def test_npz_missing_key(tmp_path):
    np.savez(tmp_path / "k.npz", X=np.zeros((3, 2)))
    with pytest.raises(InputError, match="lacks the array\\(s\\) 'Y'"):
        io.load_samples(tmp_path / "k.npz")


def test_not_an_npz_or_npy(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    for name in ("bad.npz", "bad.npy"):
        with pytest.raises(InputError, match="not a valid"):
            io.load_samples(tmp_path / name)


def test_non_numeric_column(tmp_path):
    pd.DataFrame({"x": [1.0, 2.0], "colour": ["red", "blue"], "y": [0.0, 1.0]}).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(InputError, match="colour are not numeric"):
        io.load_samples(tmp_path / "c.csv")


def test_unknown_target_column(tmp_path, data):
    X, Y, _ = data
    io.save_samples(tmp_path / "s.csv", X, Y)
    with pytest.raises(InputError, match="no column 'label'"):
        io.load_samples(tmp_path / "s.csv", target_columns="label")
    io.save_samples(tmp_path / "s.npy", X, Y)
    with pytest.raises(InputError, match="out of range"):
        io.load_samples(tmp_path / "s.npy", target_columns=9)
    with pytest.raises(InputError, match="positions"):
        io.load_samples(tmp_path / "s.npy", target_columns="y")
    with pytest.raises(InputError, match="leave at least one input"):
        io.load_samples(tmp_path / "s.npy", target_columns=[0, 1, 2, 3, 4])


def test_nan_detected_in_table_and_in_memory_map(tmp_path, monkeypatch, data):
    X, Y, _ = data
    Xbad = X.copy()
    Xbad[30, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):  # refused on the way out too
        io.save_samples(tmp_path / "s.csv", Xbad, Y)
    pd.DataFrame(np.column_stack([Xbad, Y])).to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(InputError, match="NaN"):
        io.load_samples(tmp_path / "s.csv")
    np.save(tmp_path / "s.npy", np.column_stack([Xbad, Y]))
    # check in chunks of 8 rows: the bad row is in the fourth chunk, and its index is reported
    monkeypatch.setattr(io, "_CHECK_ROWS", 8)
    with pytest.raises(InputError, match="first at row 30"):
        io.load_samples(tmp_path / "s.npy")


def test_length_mismatch_with_targets_file(tmp_path, data):
    X, Y, _ = data
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y[:-1])
    with pytest.raises(InputError, match="different numbers of samples"):
        io.load_samples(tmp_path / "x.npy", targets=tmp_path / "y.npy")


def test_single_column_npy_needs_targets(tmp_path):
    np.save(tmp_path / "one.npy", np.zeros((5, 1)))
    with pytest.raises(InputError, match="separate file"):
        io.load_samples(tmp_path / "one.npy")


def test_empty_csv(tmp_path):
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(InputError, match="empty"):
        io.load_samples(tmp_path / "e.csv")
    (tmp_path / "h.csv").write_text("x0,y\n")
    with pytest.raises(InputError, match="no rows"):
        io.load_samples(tmp_path / "h.csv")


# ------------------------------------------------------------------------------------------ atomic writes
def _siblings(path):
    return sorted(p.name for p in path.parent.iterdir())


def test_atomic_output_replaces_only_when_complete(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    target.chmod(0o640)
    with files.atomic_output(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".f.txt.part-")
        tmp.write_text("new")
        assert target.read_text() == "old"  # nothing visible before the block ends
    assert target.read_text() == "new" and _siblings(target) == ["f.txt"]
    assert target.stat().st_mode & 0o777 == 0o640  # the replaced file's mode is kept
    for exc in (RuntimeError("writer failed"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with files.atomic_output(target) as tmp:
                tmp.write_text("half")
                raise exc
        assert target.read_text() == "new" and _siblings(target) == ["f.txt"]


def test_atomic_outputs_replace_all_files_or_none(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.json"
    a.write_text("old a")
    b.write_text("old b")
    for exc in (RuntimeError("figure failed"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with files.atomic_outputs([a, b]) as (ta, tb):
                assert ta.suffix == ".csv" and tb.suffix == ".json"   # writers that choose by suffix
                ta.write_text("new a")                                # the first file is complete ...
                raise exc                                             # ... the second never is
        assert (a.read_text(), b.read_text()) == ("old a", "old b") and _siblings(a) == ["a.csv", "b.json"]
    with files.atomic_outputs([a, b]) as (ta, tb):
        ta.write_text("new a")
        tb.write_text("new b")
    assert (a.read_text(), b.read_text()) == ("new a", "new b") and _siblings(a) == ["a.csv", "b.json"]
    with pytest.raises(InputError, match="same file twice"):
        with files.atomic_outputs([a, tmp_path / "." / "a.csv"]):
            pass


def test_outputs_that_are_not_regular_files_or_inputs_are_refused(tmp_path):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "model.json"
    link.symlink_to(fifo)               # a rename would replace the pipe itself by a file
    for path in (fifo, link):
        with pytest.raises(InputError, match="not a regular file"):
            files.check_writable(path)
        with pytest.raises(InputError, match="not a regular file"):
            with files.atomic_output(path):
                pass
    assert fifo.is_fifo()
    data = tmp_path / "data.npz"
    data.write_bytes(b"x")
    with pytest.raises(InputError, match="--out .* same file as DATA"):
        files.check_distinct({"DATA": str(data)}, {"--out": str(tmp_path / "." / "data.npz")})
    with pytest.raises(InputError, match="--diagnostics .* same file as --out"):
        files.check_distinct({"DATA": str(data)}, {"--out": tmp_path / "m.json", "--diagnostics": tmp_path / "m.json"})
    files.check_distinct({"DATA": str(data), "--targets": None}, {"--out": tmp_path / "m.json", "--diagnostics": None})


@pytest.mark.parametrize("ext", FORMATS)
def test_a_stream_that_fails_midway_leaves_the_previous_file(tmp_path, data, ext):
    X, Y, _ = data
    target = tmp_path / f"s{ext}"
    io.save_samples(target, X, Y)
    before = target.read_bytes()

    def broken():
        yield X[:10], Y[:10]
        yield X[10:20], Y[10:20]
        raise RuntimeError("the generator died")

    with pytest.raises(RuntimeError, match="died"):
        io.save_sample_stream(target, broken(), n_samples=37)
    assert target.read_bytes() == before and _siblings(target) == [target.name]
    # a bad chunk part-way, and (.npy) a stream shorter than its header: errors that leave the old file
    with pytest.raises(InputError, match="chunk 1"):
        io.save_sample_stream(target, iter([(X[:10], Y[:10]), (np.full((1, 4), np.nan), Y[:1])]), n_samples=37)
    assert target.read_bytes() == before and _siblings(target) == [target.name]
    if ext == ".npy":
        with pytest.raises(InputError, match="not n_samples=37"):
            io.save_sample_stream(target, iter([(X[:10], Y[:10])]), n_samples=37)
        assert target.read_bytes() == before and _siblings(target) == [target.name]


def test_check_writable_and_free_space(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is a file, not a folder"):
        files.check_writable(tmp_path / "file" / "x.json", "--out")
    with pytest.raises(InputError, match="is a directory"):
        files.check_writable(tmp_path, "--out")
    out = files.check_writable(tmp_path / "new" / "deeper" / "x.json", "--out")
    assert out.parent.is_dir() and list(out.parent.iterdir()) == []  # the probe is removed
    with pytest.raises(InputError, match=r"need about .* PiB .* free"):
        files.check_free_space(tmp_path / "x.npy", io.sample_file_bytes(10**15, 11, ".npy"), "10^15 rows")
    files.check_free_space(tmp_path / "x.npy", io.sample_file_bytes(10, 11, ".npy"), "10 rows")


# ------------------------------------------------------------------------------------------ corrupt files
def test_truncated_and_lying_npy_headers_are_reported_not_allocated(tmp_path, data):
    X, Y, _ = data
    io.save_samples(tmp_path / "s.npy", X, Y)
    raw = (tmp_path / "s.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:200])
    with pytest.raises(InputError, match="cut.npy is truncated or corrupt: its header promises shape \\(37, 5\\)"):
        io.load_samples(tmp_path / "cut.npy")
    import io as _stdio

    header = _stdio.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
    (tmp_path / "big.npy").write_bytes(header.getvalue() + b"\0" * 80)
    with pytest.raises(InputError, match="7.3 TiB"):
        io.load_samples(tmp_path / "big.npy")
    import zipfile

    with zipfile.ZipFile(tmp_path / "big.npz", "w") as zf:
        zf.writestr("X.npy", header.getvalue() + b"\0" * 80)
        zf.writestr("Y.npy", raw)
    with pytest.raises(InputError, match="array 'X' of big.npz is truncated or corrupt"):
        io.load_samples(tmp_path / "big.npz")
    np.save(tmp_path / "obj.npy", np.array([None, 1], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="without pickle"):
        io.load_samples(tmp_path / "obj.npy")


def test_csv_written_by_pandas_with_default_header_or_index_reads_as_its_data(tmp_path):
    # DataFrame(array).to_csv() writes a header 0, 1, ..., m - 1 (once read as a row of data, which shifted
    # the targets by a row) and, without index=False, a first column "Unnamed: 0" of row numbers (once read
    # as an input)
    a = np.random.default_rng(0).standard_normal((100, 5))
    files = {"default_header": dict(index=False), "with_index": dict(), "named_with_index": dict()}
    for name, kw in files.items():
        df = pd.DataFrame(a, columns=list("abcdy") if name.startswith("named") else None)
        df.to_csv(tmp_path / f"{name}.csv", **kw)
        X, Y = io.load_samples(tmp_path / f"{name}.csv")
        np.testing.assert_array_equal(np.column_stack([X, Y]), a)
    np.savetxt(tmp_path / "plain.csv", a, delimiter=",")            # no header at all: still data
    X, Y = io.load_samples(tmp_path / "plain.csv")
    assert X.shape == (100, 4) and np.allclose(Y, a[:, 4])


def test_a_csv_of_whole_numbers_whose_first_row_is_0_to_m_keeps_that_row(tmp_path):
    # without a fractional value below it, a first row 0, 1, ..., m - 1 may be data: it is kept
    (tmp_path / "ints.csv").write_text("0,1\n1,2\n2,3\n3,4\n")
    X, Y = io.load_samples(tmp_path / "ints.csv")
    np.testing.assert_array_equal(X[:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(Y, [1, 2, 3, 4])


def test_whole_number_floats_under_pandas_default_header_read_as_data(tmp_path):
    # floats that happen to be whole (counts stored as float) are written "1.0": pandas parses a float
    # column, so the row 0, 1, 2 above them is its header
    a = np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 1.0], [5.0, 6.0, 0.0], [7.0, 8.0, 1.0]])
    pd.DataFrame(a).to_csv(tmp_path / "f.csv", index=False)
    X, Y = io.load_samples(tmp_path / "f.csv")
    np.testing.assert_array_equal(np.column_stack([X, Y]), a)


def test_a_targets_npz_with_one_array_is_read_by_default_name_only(tmp_path):
    X = np.random.default_rng(0).standard_normal((10, 3))
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "t.npz", labels=X[:, 0])
    _, Y = io.load_samples(tmp_path / "x.npy", targets=tmp_path / "t.npz")      # the only array stands in for "Y"
    np.testing.assert_array_equal(Y, X[:, 0])
    with pytest.raises(InputError, match="no array 'wrong'"):
        io.load_samples(tmp_path / "x.npy", targets=tmp_path / "t.npz", y_key="wrong")
    with pytest.raises(InputError, match="whole targets array"):
        io.load_samples(tmp_path / "x.npy", targets=tmp_path / "t.npz", target_columns=[0])
