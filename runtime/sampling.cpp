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
  if (!std::isfinite(p.frequency_penalty)) bad("frequency_penalty must be finite (0 = off)");
  if (!std::isfinite(p.presence_penalty)) bad("presence_penalty must be finite (0 = off)");
}

void check_logit_bias(const std::vector<std::pair<int32_t, float>>& bias, int32_t n_vocab) {
  std::unordered_set<int32_t> banned;
  for (const auto& [id, b] : bias) {
    if (id < 0 || id >= n_vocab) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[sampling] logit bias for token " +
                                                   std::to_string(id) +
                                                   ", outside the vocabulary (0.." +
                                                   std::to_string(n_vocab - 1) + ")");
    }
    if (std::isnan(b) || b == INFINITY) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[sampling] logit bias for token " + std::to_string(id) + " is " +
                      (std::isnan(b) ? "NaN" : "+infinity") +
                      "; a bias is finite, or -infinity to ban the token");
    }
    if (b == -INFINITY) banned.insert(id);
  }
  if ((int64_t)banned.size() == (int64_t)n_vocab) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[sampling] the logit bias bans every token");
  }
}

void Sampler::prepare(int32_t n_vocab) {
  if (!p_.logit_bias.empty() && bias_.size() != (size_t)n_vocab) {
    check_logit_bias(p_.logit_bias, n_vocab);
    bias_.assign((size_t)n_vocab, 0.0f);
    for (const auto& [id, b] : p_.logit_bias) bias_[(size_t)id] += b;
  }
}

void Sampler::accept(int32_t token) {
  if (p_.frequency_penalty == 0.0f && p_.presence_penalty == 0.0f) return;
  if (token < 0) return;
  if ((size_t)token >= counts_.size()) counts_.resize((size_t)token + 1, 0);
  ++counts_[(size_t)token];
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab, const std::vector<int32_t>& recent,
                        const uint8_t* allowed, const std::function<bool(int32_t)>* accept) {
  prepare(n_vocab);
  cand_.clear();
  if (bias_.empty()) {
    for (int32_t i = 0; i < n_vocab; ++i) {
      if (!allowed || allowed[i]) cand_.emplace_back(logits[i], i);
    }
  } else {
    for (int32_t i = 0; i < n_vocab; ++i) {
      if ((!allowed || allowed[i]) && bias_[(size_t)i] != -INFINITY) {
        cand_.emplace_back(logits[i] + bias_[(size_t)i], i);
      }
    }
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
  if (!counts_.empty()) {
    for (auto& c : cand_) {
      const int32_t n = (size_t)c.second < counts_.size() ? counts_[(size_t)c.second] : 0;
      if (n > 0) c.first -= (float)n * p_.frequency_penalty + p_.presence_penalty;
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
