"""Regenerates the codec fixtures of decode::compressed's tests.

Short espeak-ng speech encoded by ffmpeg (libmp3lame, libvorbis, libopus,
aac) as 16 kHz mono and 44.1 kHz stereo, plus files holding what melforge
rejects as unsupported (ALAC in M4A, a video-only MP4, FLAC in Ogg). The
references the tests compare with: `<name>.ref.f32`, the mono mean as
float32 from soundfile (MP3, Vorbis, Opus) or ffmpeg (M4A), and
expected.json, each file's rate, channels and length as the reference
decodes it. Run from this folder: python3 make.py
"""

import json
import subprocess
import tempfile

import numpy as np
import soundfile as sf

CODECS = {"mp3": "libmp3lame", "ogg": "libvorbis", "opus": "libopus", "m4a": "aac"}


def sh(*args):
    subprocess.run(args, check=True)


def reference(path):
    """(rate, channels, mono float32) as soundfile or, for M4A, ffmpeg decodes."""
    if path.endswith(".m4a"):
        probe = subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
             "stream=sample_rate,channels", "-of", "csv=p=0", path],
            check=True, capture_output=True, text=True).stdout.strip().split(",")
        rate, ch = int(probe[0]), int(probe[1])
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "f32le", "-"],
                             check=True, capture_output=True).stdout
        y = np.frombuffer(raw, dtype="<f4").reshape(-1, ch)
    else:
        y, rate = sf.read(path, dtype="float32", always_2d=True)
        ch = y.shape[1]
    return rate, ch, y.mean(axis=1, dtype=np.float32).astype("<f4")


def main():
    with tempfile.TemporaryDirectory() as t:
        sh("espeak-ng", "-w", f"{t}/s.wav", "Decoders agree.")
        sh("sox", f"{t}/s.wav", "-r", "16000", f"{t}/m.wav", "trim", "0", "0.5")
        sh("sox", f"{t}/s.wav", "-r", "44100", "-c", "2", f"{t}/st.wav", "trim", "0.1", "0.35")
        for ext, enc in CODECS.items():
            for src, name in [("m", "speech16k_mono"), ("st", "speech44k_stereo")]:
                sh("ffmpeg", "-v", "error", "-y", "-i", f"{t}/{src}.wav", "-c:a", enc,
                   "-map_metadata", "-1", "-fflags", "+bitexact", f"{name}.{ext}")
        sh("ffmpeg", "-v", "error", "-y", "-i", f"{t}/m.wav", "-c:a", "alac", "alac.m4a")
        sh("ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
           "testsrc=size=64x48:rate=5:duration=0.4", "-c:v", "mpeg4", "video_only.mp4")
        sh("ffmpeg", "-v", "error", "-y", "-i", f"{t}/m.wav", "-c:a", "flac", "flac.oga")
    expected = {}
    for ext in CODECS:
        for name in ["speech16k_mono", "speech44k_stereo"]:
            rate, ch, mono = reference(f"{name}.{ext}")
            expected[f"{name}.{ext}"] = {"rate": rate, "channels": ch, "frames": len(mono)}
            if name == "speech16k_mono":
                mono.tofile(f"{name}.{ext}.ref.f32")
    with open("expected.json", "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
