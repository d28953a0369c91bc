#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <unordered_set>

#include "base/error.h"

namespace lilims::runtime {

int32_t argmax(const float* logits, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  auto bad = [](const std::string& what) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[sampling] " + what);
  };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) bad("temperature must be >= 0");
  if (p.top_k < 0) bad("top_k must be >= 0 (0 = off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p must be in (0, 1] (1 = off)");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p must be in [0, 1] (0 = off)");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
    bad("repeat_penalty must be > 0 (1 = off)");
  }
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab, const std::vector<int32_t>& recent,
                        const uint8_t* allowed, const std::function<bool(int32_t)>* accept) {
  cand_.clear();
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (!allowed || allowed[i]) cand_.emplace_back(logits[i], i);
  }
  if (cand_.empty()) return -1;
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    const size_t n = p_.repeat_last_n < 0 ? recent.size()
                                          : std::min(recent.size(), (size_t)p_.repeat_last_n);
    std::unordered_set<int32_t> seen(recent.end() - (ptrdiff_t)n, recent.end());
    for (auto& c : cand_) {
      if (seen.count(c.second)) {
        c.first = c.first > 0 ? c.first / p_.repeat_penalty : c.first * p_.repeat_penalty;
      }
    }
  }
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (accept) {
    // Test the likeliest tokens first; only if none passes, test them all.
    const size_t head = std::min<size_t>(cand_.size(), 256);
    std::partial_sort(cand_.begin(), cand_.begin() + (ptrdiff_t)head, cand_.end(), by_logit);
    kept_.clear();
    for (size_t i = 0; i < head; ++i) {
      if ((*accept)(cand_[i].second)) {
        kept_.push_back(cand_[i]);
        if (p_.temperature <= 0.0f) break;  // greedy: the first acceptable one wins
      }
    }
    if (kept_.empty()) {
      for (size_t i = head; i < cand_.size(); ++i) {
        if ((*accept)(cand_[i].second)) kept_.push_back(cand_[i]);
      }
    }
    if (kept_.empty()) return -1;
    cand_.swap(kept_);
  }
  if (p_.temperature <= 0.0f) {
    return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;
  }
  size_t k = cand_.size();
  if (p_.top_k > 0 && (size_t)p_.top_k < k) k = (size_t)p_.top_k;
  std::partial_sort(cand_.begin(), cand_.begin() + (ptrdiff_t)k, cand_.end(), by_logit);
  cand_.resize(k);
  // softmax at temperature
  const float mx = cand_[0].first;
  double sum = 0.0;
  for (auto& c : cand_) {
    c.first = std::exp((c.first - mx) / p_.temperature);
    sum += c.first;
  }
  for (auto& c : cand_) c.first = (float)(c.first / sum);
  // min-p: drop tokens below min_p times the best probability
  if (p_.min_p > 0.0f) {
    const float floor_p = p_.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].first >= floor_p) ++keep;
    cand_.resize(keep);
  }
  // top-p: the smallest prefix whose mass reaches top_p
  if (p_.top_p < 1.0f) {
    double mass = 0.0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      mass += cand_[keep++].first;
      if (mass >= p_.top_p) break;
    }
    cand_.resize(keep);
  }
  double total = 0.0;
  for (const auto& c : cand_) total += c.first;
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_);
  for (const auto& c : cand_) {
    r -= c.first;
    if (r <= 0.0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace lilims::runtime
