#include "runtime/constrain/json_grammar.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/error.h"

namespace lilims::runtime {

void Grammar::too_many_nodes() {
  throw Error(LILIMS_ERR_INVALID_ARGUMENT,
              "[json-schema] #: the schema needs a grammar of more than " + std::to_string(kMaxNodes) +
                  " states; counted repeats multiply when nested (minItems / maxItems around "
                  "minLength / maxLength, {n,m} inside {n,m} in a pattern): loosen or drop some of "
                  "those bounds");
}

std::vector<int32_t> Grammar::distances_to_end(const bool* usable,
                                               std::vector<int32_t>* rule_min_out) const {
  std::vector<int32_t> dist(nodes.size(), kInfinite);
  std::vector<int32_t> rmin(rule_start.size(), kInfinite);
  // Bellman-Ford sweeps: every edge weighs at least 0 and the values only
  // fall, so this settles; sweeping backwards matches how builders number
  // nodes (a fragment's end after its start) and settles in a few sweeps.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = nodes.size(); i-- > 0;) {
      const Node& n = nodes[i];
      int64_t best = n.end ? 0 : kInfinite;
      for (const ByteEdge& e : n.bytes) {
        bool any = usable == nullptr;
        for (int b = e.lo; !any && b <= e.hi; ++b) any = usable[b];
        if (any) best = std::min<int64_t>(best, 1 + (int64_t)dist[(size_t)e.to]);
      }
      for (int32_t t : n.eps) best = std::min<int64_t>(best, dist[(size_t)t]);
      for (const CallEdge& c : n.calls) {
        best = std::min<int64_t>(best, (int64_t)rmin[(size_t)c.rule] + dist[(size_t)c.to]);
      }
      if (best < dist[i]) {
        dist[i] = (int32_t)best;
        changed = true;
      }
    }
    for (size_t r = 0; r < rule_start.size(); ++r) {
      const int32_t d = dist[(size_t)rule_start[r]];
      if (d < rmin[r]) {
        rmin[r] = d;
        changed = true;
      }
    }
  }
  if (rule_min_out) *rule_min_out = std::move(rmin);
  return dist;
}

bool Grammar::trim() {
  const std::vector<int32_t> dist = distances_to_end(nullptr, &rule_min);
  const auto live = [&](int32_t node) { return dist[(size_t)node] < kInfinite; };
  for (Node& n : nodes) {
    n.bytes.erase(std::remove_if(n.bytes.begin(), n.bytes.end(),
                                 [&](const ByteEdge& e) { return !live(e.to); }),
                  n.bytes.end());
    n.eps.erase(std::remove_if(n.eps.begin(), n.eps.end(), [&](int32_t t) { return !live(t); }),
                n.eps.end());
    n.calls.erase(std::remove_if(n.calls.begin(), n.calls.end(),
                                 [&](const CallEdge& c) {
                                   return rule_min[(size_t)c.rule] >= kInfinite || !live(c.to);
                                 }),
                  n.calls.end());
  }
  return rule_min[(size_t)root_rule] < kInfinite;
}

GrammarMatcher::GrammarMatcher(const Grammar& g, int32_t base_node) : g_(g) {
  ++stamp_;
  if (base_node >= 0) {
    closure(intern(base_node, kBase), &start_, 0);
  } else {
    closure(intern(g.rule_start[(size_t)g.root_rule], kRoot), &start_, 0);
  }
  std::sort(start_.tops.begin(), start_.tops.end());
}

int32_t GrammarMatcher::intern(int32_t node, int32_t parent) {
  const uint64_t key = ((uint64_t)(uint32_t)node << 32) | (uint32_t)(parent + 2);
  auto [it, fresh] = index_.try_emplace(key, (int32_t)frames_.size());
  if (fresh) {
    frames_.push_back({node, parent});
    seen_.push_back(0);
  }
  return it->second;
}

// Adds to `out` every frame with byte edges reachable from `frame` without
// consuming a byte: through empty edges, into called rules and, where a rule
// ends, back to the frame that called it.
void GrammarMatcher::closure(int32_t frame, State* out, int chain) {
  if (seen_[(size_t)frame] == stamp_) return;
  seen_[(size_t)frame] = stamp_;
  const Frame f = frames_[(size_t)frame];
  const Grammar::Node& n = g_.nodes[(size_t)f.node];
  if (!n.bytes.empty()) out->tops.push_back(frame);
  if (n.end) {
    if (f.parent == kRoot) {
      out->ended = true;
    } else if (f.parent == kBase) {
      out->popped = true;
    } else {
      closure(f.parent, out, chain);
    }
  }
  for (int32_t t : n.eps) closure(intern(t, f.parent), out, chain);
  if (chain < kMaxCallChain) {
    for (const Grammar::CallEdge& c : n.calls) {
      const int32_t ret = intern(c.to, f.parent);
      closure(intern(g_.rule_start[(size_t)c.rule], ret), out, chain + 1);
    }
  }
}

void GrammarMatcher::step(const State& in, uint8_t b, State* out) {
  out->tops.clear();
  out->ended = false;
  out->popped = false;
  ++stamp_;
  for (int32_t top : in.tops) {
    const Frame f = frames_[(size_t)top];
    for (const Grammar::ByteEdge& e : g_.nodes[(size_t)f.node].bytes) {
      if (b >= e.lo && b <= e.hi) closure(intern(e.to, f.parent), out, 0);
    }
  }
  std::sort(out->tops.begin(), out->tops.end());
}

bool GrammarMatcher::feed(const State& in, std::string_view bytes, State* out) {
  State cur = in, next;
  for (char c : bytes) {
    if (cur.tops.empty()) return false;
    step(cur, (uint8_t)c, &next);
    if (next.tops.empty() && !next.ended && !next.popped) return false;
    std::swap(cur, next);
  }
  *out = std::move(cur);
  return true;
}

int32_t GrammarMatcher::intern_state(const State& s) {
  std::string key(s.tops.size() * sizeof(int32_t) + 1, '\0');
  key[0] = (char)(s.ended | s.popped << 1);
  if (!s.tops.empty()) std::memcpy(&key[1], s.tops.data(), s.tops.size() * sizeof(int32_t));
  auto [it, fresh] = state_index_.try_emplace(std::move(key), (int32_t)states_.size());
  if (fresh) {
    states_.push_back(s);
    trans_.emplace_back();
  }
  return it->second;
}

int32_t GrammarMatcher::step_id(int32_t id, uint8_t b) {
  std::unique_ptr<std::array<int32_t, 256>>& t = trans_[(size_t)id];
  if (!t) {
    t = std::make_unique<std::array<int32_t, 256>>();
    t->fill(-1);
  }
  std::array<int32_t, 256>* table = t.get();  // stays put while trans_ grows
  if ((*table)[b] < 0) {
    State out;
    step(states_[(size_t)id], b, &out);
    (*table)[b] = intern_state(out);
  }
  return (*table)[b];
}

int64_t GrammarMatcher::min_completion(const State& s, const std::vector<int32_t>& dist) const {
  int64_t best = s.ended ? 0 : Grammar::kInfinite;
  for (int32_t top : s.tops) {
    int64_t sum = 0;
    for (int32_t fr = top; fr >= 0 && sum < best; fr = frames_[(size_t)fr].parent) {
      sum += dist[(size_t)frames_[(size_t)fr].node];
    }
    best = std::min(best, sum);
  }
  return best;
}

}  // namespace lilims::runtime
