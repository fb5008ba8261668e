"""Makes this directory's two files from WordLlama's PyPI wheel (MIT licence):

- `tokenizer.json`: the wheel's `l2_supercat` tokenizer (Llama 2's 32,000-token vocabulary), as
  it ships;
- `vectors.i8`: its 256-dimension token vectors (`l2_supercat_256.safetensors`, float16), each
  row quantised to bytes: a little-endian f32 scale, then 256 signed bytes (value = byte × scale).

Run with Python 3 and the packages `numpy` and `safetensors`: `python make.py`. Fetches the pinned
wheel with pip (checked against its SHA-256) into a temporary directory.
"""

import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
from safetensors.numpy import load

WHEEL = "wordllama==0.4.0.post1"
WHEEL_FILE = "wordllama-0.4.0.post1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
WHEEL_SHA256 = "42c2c88907ace0b0681ac6f9092d6a300a6409a5d2d61071a3fb5e7159370c97"
HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux2014_x86_64", WHEEL, "-d", tmp],
            check=True,
        )
        wheel = pathlib.Path(tmp) / WHEEL_FILE
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            sys.exit(f"{WHEEL_FILE}: SHA-256 {digest}, expected {WHEEL_SHA256}")
        with zipfile.ZipFile(wheel) as z:
            tokenizer = z.read("wordllama/tokenizers/l2_supercat_tokenizer_config.json")
            weights = load(z.read("wordllama/weights/l2_supercat_256.safetensors"))
    vectors = weights["embedding.weight"].astype(np.float32)
    scale = np.abs(vectors).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    quantised = np.round(vectors / scale[:, None]).astype(np.int8)
    rows = np.zeros((vectors.shape[0], 4 + vectors.shape[1]), dtype=np.uint8)
    rows[:, :4] = scale.astype("<f4").view(np.uint8).reshape(-1, 4)
    rows[:, 4:] = quantised.view(np.uint8)
    (HERE / "tokenizer.json").write_bytes(tokenizer)
    (HERE / "vectors.i8").write_bytes(rows.tobytes())
    print(f"{vectors.shape[0]} tokens, {vectors.shape[1]} dimensions")


if __name__ == "__main__":
    main()
