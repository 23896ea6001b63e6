/* The sums and extremes of the per-layer metrics (probe/stats.py) in one pass over a
 * float32 tensor, where torch needs one call and one pass per number.
 *
 * Sums are kept in float64, in LANES fixed lanes added up in a fixed order at the end:
 * the same result on every machine, vector width and thread count (no reassociation:
 * built with -ffp-contract=off, never -ffast-math). Extremes follow torch: a NaN anywhere
 * makes min and max NaN. Loaded by probe/fused.py through ctypes: a plain shared library,
 * no Python module and no Python API (setup.py builds it). */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* -ffast-math (or -Ofast, or -ffinite-math-only) arriving through CFLAGS would fold away
 * the NaN tests (t != t) and reassociate the sums: no kernel rather than a wrong one (the
 * install goes on without it; torch computes the same numbers) */
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "the probe's kernel must not be built with -ffast-math, -Ofast or -ffinite-math-only"
#endif

/* the functions' signatures and meaning: probe/fused.py loads a library only when it
 * reads the number it was written for (a stale build is never called) */
__attribute__((visibility("default"))) const int32_t qcd_fused_version = 4;

#define LANES 8

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
/* the same lanes in wider registers where the CPU has them (sse4.1 and avx2 also round in
 * vectors): the same numbers */
#define WIDE __attribute__((target_clones("avx2", "sse4.1", "default")))
#endif
#endif
#ifndef WIDE
#define WIDE
#endif

/* out: min, max, sum, sum of squares */
WIDE void qcd_side_f32(const float *restrict x, int64_t n, double *restrict out)
{
    double sum[LANES] = {0}, squares[LANES] = {0};
    float low[LANES], high[LANES];
    int nan[LANES] = {0};
    for (int j = 0; j < LANES; j++) {
        low[j] = INFINITY;
        high[j] = -INFINITY;
    }
    int64_t whole = n - n % LANES;
    for (int64_t i = 0; i < whole; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            float v = x[i + j];
            double w = v;
            sum[j] += w;
            squares[j] += w * w;
            low[j] = v < low[j] ? v : low[j];
            high[j] = v > high[j] ? v : high[j];
            nan[j] |= v != v;
        }
    }
    for (int64_t i = whole; i < n; i++) {
        float v = x[i];
        double w = v;
        int j = (int)(i - whole);
        sum[j] += w;
        squares[j] += w * w;
        low[j] = v < low[j] ? v : low[j];
        high[j] = v > high[j] ? v : high[j];
        nan[j] |= v != v;
    }
    double total = 0, total_squares = 0;
    float lowest = INFINITY, highest = -INFINITY;
    int any_nan = 0;
    for (int j = 0; j < LANES; j++) {
        total += sum[j];
        total_squares += squares[j];
        lowest = low[j] < lowest ? low[j] : lowest;
        highest = high[j] > highest ? high[j] : highest;
        any_nan |= nan[j];
    }
    out[0] = any_nan ? NAN : lowest;
    out[1] = any_nan ? NAN : highest;
    out[2] = total;
    out[3] = total_squares;
}

/* diff = a - b (float32, as torch subtracts), written to diff; out: sum of diff^2, sum of
 * |diff|, max |diff| (NaN if one is), the largest finite |diff| / |b| (0 if none) */
static inline __attribute__((always_inline)) void pair(
    const float *restrict b, const float *restrict a, float *restrict diff, int64_t n,
    double *restrict out)
{
    double noise[LANES] = {0}, l1[LANES] = {0};
    float top[LANES] = {0}, ratio[LANES] = {0};
    int nan[LANES] = {0};
    int64_t whole = n - n % LANES;
    for (int64_t i = 0; i < whole; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            float v = a[i + j] - b[i + j];
            float m = fabsf(v);
            double w = v;
            diff[i + j] = v;
            noise[j] += w * w;
            l1[j] += (double)m;
            top[j] = m > top[j] ? m : top[j];
            nan[j] |= m != m;
        }
    }
    /* a loop of its own: with the division in the loop above, neither vectorises */
    for (int64_t i = 0; i < whole; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            float r = fabsf(diff[i + j]) / fabsf(b[i + j]);
            r = r <= FLT_MAX ? r : 0.0f;             /* b == 0: inf or NaN, left out */
            ratio[j] = r > ratio[j] ? r : ratio[j];
        }
    }
    for (int64_t i = whole; i < n; i++) {
        float v = a[i] - b[i];
        float m = fabsf(v);
        double w = v;
        int j = (int)(i - whole);
        diff[i] = v;
        noise[j] += w * w;
        l1[j] += (double)m;
        top[j] = m > top[j] ? m : top[j];
        nan[j] |= m != m;
        float r = m / fabsf(b[i]);
        r = r <= FLT_MAX ? r : 0.0f;
        ratio[j] = r > ratio[j] ? r : ratio[j];
    }
    double total_noise = 0, total_l1 = 0;
    float largest = 0, largest_ratio = 0;
    int any_nan = 0;
    for (int j = 0; j < LANES; j++) {
        total_noise += noise[j];
        total_l1 += l1[j];
        largest = top[j] > largest ? top[j] : largest;
        largest_ratio = ratio[j] > largest_ratio ? ratio[j] : largest_ratio;
        any_nan |= nan[j];
    }
    out[0] = total_noise;
    out[1] = total_l1;
    out[2] = any_nan ? NAN : largest;
    out[3] = largest_ratio;
}

/* Fake quantization as torch's kernel computes it, in float32: round half to even of
 * x * inverse, clamped to [low, high] (the integer range less the zero point; whole
 * numbers, so clamping first gives the same), times the scale. A NaN becomes low, as
 * the kernel makes it the range's low end. */
static inline float fake_quant_one(float x, float inverse, float scale, float low, float high)
{
    float t = x * inverse;
    t = t != t ? low : t;
    t = t < low ? low : t;
    t = t > high ? high : t;
    return nearbyintf(t) * scale;
}

/* per tensor: out = fake_quant(x) */
WIDE void qcd_fake_quant_f32(const float *restrict x, float *restrict out, int64_t n,
                             float inverse, float scale, float low, float high)
{
    int64_t whole = n - n % LANES;
    /* in blocks of LANES: a loop of unknown length is not vectorised at -O2 */
    for (int64_t i = 0; i < whole; i += LANES)
        for (int j = 0; j < LANES; j++)
            out[i + j] = fake_quant_one(x[i + j], inverse, scale, low, high);
    for (int64_t i = whole; i < n; i++)
        out[i] = fake_quant_one(x[i], inverse, scale, low, high);
}

/* per channel, x seen as [outer, channels, inner]; returns 1 where x holds a NaN (what
 * torch's per-channel kernel makes of it is left to that kernel: out is then unused) */
WIDE int qcd_fake_quant_channels_f32(const float *restrict x, float *restrict out,
                                     int64_t outer, int64_t channels, int64_t inner,
                                     const float *restrict inverse,
                                     const float *restrict scale,
                                     const float *restrict low, const float *restrict high)
{
    int nan = 0;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t c = 0; c < channels; c++) {
            const float *row = x + (o * channels + c) * inner;
            float *to = out + (o * channels + c) * inner;
            float inv = inverse[c], step = scale[c], lo = low[c], hi = high[c];
            int64_t whole = inner - inner % LANES;
            for (int64_t i = 0; i < whole; i += LANES) {
                for (int j = 0; j < LANES; j++) {
                    nan |= row[i + j] != row[i + j];
                    to[i + j] = fake_quant_one(row[i + j], inv, step, lo, hi);
                }
            }
            for (int64_t i = whole; i < inner; i++) {
                nan |= row[i] != row[i];
                to[i] = fake_quant_one(row[i], inv, step, lo, hi);
            }
        }
    }
    return nan;
}

/* a layer's own error where its output quantizer is per tensor: q = fake_quant(x) against
 * base, q never stored; out: sum of (q - base)^2, max |q - base| (NaN if one is), sum of
 * q^2 */
WIDE void qcd_fake_quant_pair_f32(const float *restrict base, const float *restrict x,
                                  int64_t n, float inverse, float scale, float low,
                                  float high, double *restrict out)
{
    double noise[LANES] = {0}, power[LANES] = {0};
    float top[LANES] = {0};
    int nan[LANES] = {0};
    int64_t whole = n - n % LANES;
    for (int64_t i = 0; i < whole; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            float q = fake_quant_one(x[i + j], inverse, scale, low, high);
            float v = q - base[i + j];
            float m = fabsf(v);
            double w = v, p = q;
            noise[j] += w * w;
            power[j] += p * p;
            top[j] = m > top[j] ? m : top[j];
            nan[j] |= m != m;
        }
    }
    for (int64_t i = whole; i < n; i++) {
        float q = fake_quant_one(x[i], inverse, scale, low, high);
        float v = q - base[i];
        float m = fabsf(v);
        double w = v, p = q;
        int j = (int)(i - whole);
        noise[j] += w * w;
        power[j] += p * p;
        top[j] = m > top[j] ? m : top[j];
        nan[j] |= m != m;
    }
    double total_noise = 0, total_power = 0;
    float largest = 0;
    int any_nan = 0;
    for (int j = 0; j < LANES; j++) {
        total_noise += noise[j];
        total_power += power[j];
        largest = top[j] > largest ? top[j] : largest;
        any_nan |= nan[j];
    }
    out[0] = total_noise;
    out[1] = any_nan ? NAN : largest;
    out[2] = total_power;
}

/* exp(x) from adds, multiplies and bit moves alone, so the same bits on every machine and
 * vector width (no libm: its variants differ by CPU feature). x = k ln2 + r, |r| <= ln2/2,
 * k rounded half to even by the 1.5 * 2^m trick (t's low bits then hold k); exp(r) by its
 * Taylor series (its remainder below the type's rounding); 2^k built in the exponent
 * bits. Where 2^k would leave the normal range (x below about -708 in float64, -87 in
 * float32; -inf included) the result is 0: KL shifts its largest term to e^0 or keeps it
 * within e^+-30, so such a term weighs less than e^-57 of it. The test is on k's bits:
 * a comparison of floating values selecting one keeps the loop from being vectorised. A
 * NaN stays NaN. */
static inline __attribute__((always_inline)) double exp64(double x)
{
    const double shifter = 0x1.8p52, log2e = 0x1.71547652b82fep0;
    const double ln2_high = 0x1.62e42fee00000p-1, ln2_low = 0x1.a39ef35793c76p-33;
    double t = x * log2e + shifter;
    double k = t - shifter;
    double r = (x - k * ln2_high) - k * ln2_low;
    double p = 1.0 / 39916800.0;                /* to r^11: below 1e-14 */
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t whole_k;
    memcpy(&whole_k, &t, sizeof whole_k);
    whole_k -= INT64_C(0x4338000000000000);
    uint64_t power_bits = (uint64_t)(whole_k + 1023) << 52;
    double power, value;
    memcpy(&power, &power_bits, sizeof power);
    value = p * power;
    uint64_t value_bits;
    memcpy(&value_bits, &value, sizeof value_bits);
    value_bits &= (uint64_t)-(int64_t)(whole_k > -1022);
    memcpy(&value, &value_bits, sizeof value);
    return value;
}

static inline __attribute__((always_inline)) float exp32(float x)
{
    const float shifter = 0x1.8p23f, log2e = 0x1.715476p0f;
    const float ln2_high = 0x1.62e400p-1f, ln2_low = 0x1.7f7d1cp-20f;
    float t = x * log2e + shifter;
    float k = t - shifter;
    float r = (x - k * ln2_high) - k * ln2_low;
    float p = 1.0f / 5040.0f;                   /* to r^7: within 1e-7 */
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t whole_k;
    memcpy(&whole_k, &t, sizeof whole_k);
    whole_k -= 0x4B400000;
    uint32_t power_bits = (uint32_t)(whole_k + 127) << 23;
    float power, value;
    memcpy(&power, &power_bits, sizeof power);
    value = p * power;
    uint32_t value_bits;
    memcpy(&value_bits, &value, sizeof value_bits);
    value_bits &= (uint32_t)-(int32_t)(whole_k > -126);
    memcpy(&value, &value_bits, sizeof value);
    return value;
}

/* KL's three sums over float32 b, a and diff = a - b: out[0] = sum exp(b - b_shift),
 * out[1] = sum exp(b - b_shift) * diff, out[2] = sum exp(a - a_shift), in float64 (probe/
 * stats.py forms KL from them). The exponentials in float64 where ``precise`` (a small
 * tensor, whose KL may be tiny), else in float32, as torch computes them (within 1e-7).
 * Lane j sums the elements i = j mod LANES in order, as every sum here; the
 * exponentials of BLOCK elements are computed first, independent of each other, so that
 * their chains of multiplies overlap. */
#define BLOCK (4 * LANES)

static inline __attribute__((always_inline)) void kl(
    const float *restrict b, const float *restrict a, const float *restrict diff, int64_t n,
    double b_shift, double a_shift, int precise, double *restrict out)
{
    double weights[LANES] = {0}, cross[LANES] = {0}, others[LANES] = {0};
    /* a block's exponentials in their own type: float32 ones stored as float32 (converted
     * as they are added: measured a fifth faster than storing them as float64) */
    double eb64[BLOCK], ea64[BLOCK];
    float eb32[BLOCK], ea32[BLOCK];
    float b_shift32 = (float)b_shift, a_shift32 = (float)a_shift;
    int64_t blocks = n - n % BLOCK;
    for (int64_t i = 0; i < blocks; i += BLOCK) {
        if (precise) {
            for (int m = 0; m < BLOCK; m++) {
                eb64[m] = exp64((double)b[i + m] - b_shift);
                ea64[m] = exp64((double)a[i + m] - a_shift);
            }
            for (int q = 0; q < BLOCK; q += LANES) {
                for (int j = 0; j < LANES; j++) {
                    weights[j] += eb64[q + j];
                    cross[j] += eb64[q + j] * (double)diff[i + q + j];
                    others[j] += ea64[q + j];
                }
            }
        } else {
            for (int m = 0; m < BLOCK; m++) {
                eb32[m] = exp32(b[i + m] - b_shift32);
                ea32[m] = exp32(a[i + m] - a_shift32);
            }
            for (int q = 0; q < BLOCK; q += LANES) {
                for (int j = 0; j < LANES; j++) {
                    double w = eb32[q + j];
                    weights[j] += w;
                    cross[j] += w * (double)diff[i + q + j];
                    others[j] += (double)ea32[q + j];
                }
            }
        }
    }
    for (int64_t i = blocks; i < n; i++) {
        int j = (int)(i % LANES);
        double w = precise ? exp64((double)b[i] - b_shift) : exp32(b[i] - b_shift32);
        weights[j] += w;
        cross[j] += w * (double)diff[i];
        others[j] += precise ? exp64((double)a[i] - a_shift) : exp32(a[i] - a_shift32);
    }
    double total_weights = 0, total_cross = 0, total_others = 0;
    for (int j = 0; j < LANES; j++) {
        total_weights += weights[j];
        total_cross += cross[j];
        total_others += others[j];
    }
    out[0] = total_weights;
    out[1] = total_cross;
    out[2] = total_others;
}

WIDE void qcd_pair_f32(const float *restrict b, const float *restrict a,
                       float *restrict diff, int64_t n, double *restrict out)
{
    pair(b, a, diff, n, out);
}

/* a row's pair and its KL in one call: out[0..3] as qcd_pair_f32's, out[4..6] as
 * KL's three sums, kl()'s (the shifts known from the two sides' maxima) */
WIDE void qcd_pair_kl_f32(const float *restrict b, const float *restrict a,
                          float *restrict diff, int64_t n, double b_shift, double a_shift,
                          int precise, double *restrict out)
{
    pair(b, a, diff, n, out);
    kl(b, a, diff, n, b_shift, a_shift, precise, out + 4);
}
