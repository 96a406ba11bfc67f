#include <stdint.h>
#include <math.h>
#include <immintrin.h>
/* One pass over float32 values (AVX2): min, max (ignoring NaN), float64 sum of the
   numbers, NaN count, fill count. */
void f32_stats(const float *restrict v, int64_t n, float fill, int fill_is_nan,
               double *out_min, double *out_max, double *out_sum,
               int64_t *out_nan, int64_t *out_fill) {
    __m256 lo0 = _mm256_set1_ps(INFINITY), hi0 = _mm256_set1_ps(-INFINITY), lo1 = lo0, hi1 = hi0;
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    __m256i nc = _mm256_setzero_si256(), fc = nc;
    __m256 fv = _mm256_set1_ps(fill);
    int64_t i = 0, nan = 0, fills = 0, block = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + 8);
        __m256 n0 = _mm256_cmp_ps(x0, x0, _CMP_UNORD_Q), n1 = _mm256_cmp_ps(x1, x1, _CMP_UNORD_Q);
        nc = _mm256_sub_epi32(nc, _mm256_castps_si256(n0));
        nc = _mm256_sub_epi32(nc, _mm256_castps_si256(n1));
        fc = _mm256_sub_epi32(fc, _mm256_castps_si256(_mm256_cmp_ps(x0, fv, _CMP_EQ_OQ)));
        fc = _mm256_sub_epi32(fc, _mm256_castps_si256(_mm256_cmp_ps(x1, fv, _CMP_EQ_OQ)));
        __m256 y0 = _mm256_andnot_ps(n0, x0), y1 = _mm256_andnot_ps(n1, x1);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(y0)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(y0, 1)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(y1)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(y1, 1)));
        lo0 = _mm256_min_ps(x0, lo0); hi0 = _mm256_max_ps(x0, hi0);  /* NaN x: keeps lo/hi */
        lo1 = _mm256_min_ps(x1, lo1); hi1 = _mm256_max_ps(x1, hi1);
        if (++block == (1 << 26)) { /* int32 lanes: flush well before overflow */
            int32_t t[8]; _mm256_storeu_si256((__m256i *)t, nc); for (int k = 0; k < 8; k++) nan += t[k];
            _mm256_storeu_si256((__m256i *)t, fc); for (int k = 0; k < 8; k++) fills += t[k];
            nc = fc = _mm256_setzero_si256(); block = 0;
        }
    }
    float l[8], h[8], l1[8], h1[8]; double s[16]; int32_t t[8];
    _mm256_storeu_ps(l, lo0); _mm256_storeu_ps(h, hi0); _mm256_storeu_ps(l1, lo1); _mm256_storeu_ps(h1, hi1);
    _mm256_storeu_pd(s, a0); _mm256_storeu_pd(s + 4, a1); _mm256_storeu_pd(s + 8, a2); _mm256_storeu_pd(s + 12, a3);
    _mm256_storeu_si256((__m256i *)t, nc); for (int k = 0; k < 8; k++) nan += t[k];
    _mm256_storeu_si256((__m256i *)t, fc); for (int k = 0; k < 8; k++) fills += t[k];
    float L = INFINITY, H = -INFINITY; double S = 0;
    for (int k = 0; k < 8; k++) { L = fminf(L, fminf(l[k], l1[k])); H = fmaxf(H, fmaxf(h[k], h1[k])); }
    for (int k = 0; k < 16; k++) S += s[k];
    for (; i < n; i++) {
        float x = v[i]; int isn = !(x == x); nan += isn; fills += (x == fill);
        if (!isn) { S += x; if (x < L) L = x; if (x > H) H = x; }
    }
    *out_min = (nan == n) ? NAN : L; *out_max = (nan == n) ? NAN : H; *out_sum = S;
    *out_nan = nan; *out_fill = fill_is_nan ? nan : fills;
}
