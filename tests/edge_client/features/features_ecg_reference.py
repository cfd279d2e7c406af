"""Hand-verified R-peak annotations of the two bundled real ECG recordings (test reference).

How they were made and checked (no R-peak detector package is installable next to the
gateway's dependencies, so the reference is annotations, not another detector's output):
1. an offline procedure that shares nothing with edge_client.features.ecg: baseline removed
   with two cascaded median filters (200 ms, 600 ms), then ``scipy.signal.find_peaks`` on the
   whole record with >= 400 ms spacing, keeping peaks whose prominence exceeds half the median
   of the N largest prominences (N = record length in seconds, i.e. fewer than the beats);
   the index is the apex (maximum) of the baseline-free signal;
2. every annotation was inspected on plots of the whole record (10-12 s per row) and zoomed
   on the difficult stretches: pyhrv 17-22.35 s (a motion artefact with a 2 mV baseline jump
   at 19.3 s) and pyphysio 90-99 s (baseline swing at 92.8 s, EMG bursts at 96-98 s);
   no beat is missing, none is extra, each mark sits on the R apex;
3. the RR series has no interval deviating > 15 % from its 5-beat running median
   (pyhrv RR 716-869 ms, 77.7 bpm mean; pyphysio RR 729-984 ms, 69.6 bpm mean).

Sample indices into the ECG column of each file (see features_real_data.py).
"""

import numpy as np

# pyhrv/files/SampleECG.txt, 1000 Hz, 22,350 samples: 29 beats
PYHRV_R_PEAKS = np.array([
    669, 1423, 2188, 2943, 3676, 4429, 5198, 5988, 6777, 7567, 8339, 9085, 9801, 10519, 11252, 12023, 12860,
    13728, 14597, 15446, 16259, 17018, 17760, 18509, 19271, 20039, 20810, 21556, 22293,
])

# pyphysio/test_data/medical.txt.bz2 column 0, 2048 Hz, 245,760 samples: 139 beats
MEDICAL_R_PEAKS = np.array([
    1739, 3580, 5476, 7386, 9285, 11127, 12985, 14893, 16783, 18618, 20403, 22050, 23681, 25316, 26875,
    28417, 29956, 31513, 33097, 34654, 36199, 37744, 39304, 40826, 42387, 43880, 45389, 46903, 48524, 50326,
    52342, 54299, 56289, 58298, 60183, 62063, 63854, 65589, 67444, 69368, 71205, 73106, 75084, 77044, 78939,
    80814, 82537, 84158, 85996, 87820, 89504, 91239, 92957, 94708, 96556, 98379, 100176, 101966, 103713,
    105390, 107067, 108733, 110367, 112072, 113901, 115819, 117711, 119547, 121317, 123057, 124832, 126610,
    128372, 130189, 132043, 133882, 135799, 137765, 139760, 141730, 143616, 145324, 146980, 148660, 150437,
    152305, 154122, 155832, 157504, 159190, 160913, 162717, 164609, 166470, 168292, 170036, 171843, 173713,
    175567, 177464, 179320, 181148, 182915, 184623, 186370, 188177, 190007, 191826, 193640, 195503, 197367,
    199191, 200914, 202539, 204186, 205873, 207633, 209471, 211316, 213111, 214867, 216578, 218259, 219918,
    221583, 223306, 225035, 226823, 228677, 230524, 232254, 233906, 235536, 237143, 238683, 240227, 241818,
    243498, 245271,
])
