// Internal to the paged-attention kernels: exp(x) for the shifted scores of
// a softmax (x <= 0) in vector lanes, as 2^n * p(r) with n = round(x /
// ln 2), |r| <= ln(2) / 2 and p the degree-6 Taylor polynomial (relative
// error about 1e-7, an ulp of f32). x below -87 counts as -87 (e^-87 is
// 1.6e-38: nothing next to the row's largest term, 1).
//
// Written once over the same ops as paged_attention_simd.h plus
//   static Vec Round(Vec x); static Vec Pow2(Vec n);  // n integral
#ifndef CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_EXP_H_
#define CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_EXP_H_

namespace castserve::models::internal {
namespace {

template <class V>
typename V::Vec ExpNonPositive(typename V::Vec x) {
  using Vec = typename V::Vec;
  x = V::Max(x, V::Set(-87.0f));
  const Vec n = V::Round(V::Mul(x, V::Set(1.44269504088896341f)));
  // r = x - n ln2, ln2 split so that n * hi is exact.
  Vec r = V::Fma(n, V::Set(-0.693359375f), x);
  r = V::Fma(n, V::Set(2.12194440e-4f), r);
  Vec p = V::Set(1.0f / 720);
  p = V::Fma(p, r, V::Set(1.0f / 120));
  p = V::Fma(p, r, V::Set(1.0f / 24));
  p = V::Fma(p, r, V::Set(1.0f / 6));
  p = V::Fma(p, r, V::Set(0.5f));
  p = V::Fma(p, r, V::Set(1.0f));
  p = V::Fma(p, r, V::Set(1.0f));
  return V::Mul(p, V::Pow2(n));
}

}  // namespace
}  // namespace castserve::models::internal

#endif  // CASTSERVE_MODELS_KERNELS_PAGED_ATTENTION_EXP_H_
