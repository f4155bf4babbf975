#include "trainer/algorithms/dipaco_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/check.h"

namespace narrows::trainer {
namespace {

double SquaredDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]) - b[i];
    d += x * x;
  }
  return d;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser: a cheap, well-spread hash
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<TokenSpan> CutDocuments(const std::vector<TokenSpan>& spans, int64_t doc_tokens) {
  NARROWS_CHECK(doc_tokens > 0);
  std::vector<TokenSpan> docs;
  for (const TokenSpan& s : spans) {
    const int64_t n = std::max<int64_t>(1, s.length / doc_tokens);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t start = s.start + i * doc_tokens;
      const int64_t end = i + 1 == n ? s.start + s.length : start + doc_tokens;
      docs.push_back({s.segment, start, end - start});
    }
  }
  return docs;
}

std::vector<float> DocumentFeature(const Corpus& corpus, const TokenSpan& doc, int64_t feature_tokens) {
  std::vector<float> f(kFeatureDims, 0.0f);
  const uint16_t* t = corpus.segments()[static_cast<size_t>(doc.segment)].data + doc.start;
  const int64_t n = std::min(doc.length, feature_tokens);
  for (int64_t i = 0; i < n; ++i) {
    f[Mix(t[i]) % kFeatureDims] += 1.0f;
    if (i + 1 < n) f[Mix((uint64_t{t[i]} << 16 | t[i + 1]) + (uint64_t{1} << 40)) % kFeatureDims] += 1.0f;
  }
  double norm = 0.0;
  for (float v : f) norm += static_cast<double>(v) * v;
  if (norm > 0) {
    const float inv = static_cast<float>(1.0 / std::sqrt(norm));
    for (float& v : f) v *= inv;
  }
  return f;
}

int KMeans::Nearest(const std::vector<float>& point) const {
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < centroids.size(); ++c) {
    const double d = SquaredDistance(point, centroids[c]);
    if (d < best_d) {
      best_d = d;
      best = static_cast<int>(c);
    }
  }
  return best;
}

KMeans FitKMeans(const std::vector<std::vector<float>>& points, int k, uint64_t seed, int iterations) {
  NARROWS_CHECK(k >= 1 && static_cast<size_t>(k) <= points.size());
  std::mt19937_64 rng(Mix(seed ^ 0xD1BACAULL));
  KMeans m;
  // k-means++: the first centroid uniformly, each next one with probability ~ squared distance.
  m.centroids.push_back(points[std::uniform_int_distribution<size_t>(0, points.size() - 1)(rng)]);
  std::vector<double> d2(points.size());
  while (m.centroids.size() < static_cast<size_t>(k)) {
    double total = 0.0;
    for (size_t i = 0; i < points.size(); ++i) {
      d2[i] = SquaredDistance(points[i], m.centroids[static_cast<size_t>(m.Nearest(points[i]))]);
      total += d2[i];
    }
    size_t pick = 0;
    if (total > 0) {
      double r = std::uniform_real_distribution<double>(0.0, total)(rng);
      while (pick + 1 < points.size() && r >= d2[pick]) r -= d2[pick++];
    }
    m.centroids.push_back(points[pick]);
  }
  std::vector<int> assign(points.size(), -1);
  const size_t dims = points[0].size();
  for (int it = 0; it < iterations; ++it) {
    bool changed = false;
    for (size_t i = 0; i < points.size(); ++i) {
      const int c = m.Nearest(points[i]);
      changed = changed || c != assign[i];
      assign[i] = c;
    }
    if (!changed) break;
    std::vector<std::vector<double>> sum(static_cast<size_t>(k), std::vector<double>(dims, 0.0));
    std::vector<int64_t> count(static_cast<size_t>(k), 0);
    for (size_t i = 0; i < points.size(); ++i) {
      auto& s = sum[static_cast<size_t>(assign[i])];
      for (size_t j = 0; j < dims; ++j) s[j] += points[i][j];
      ++count[static_cast<size_t>(assign[i])];
    }
    for (size_t c = 0; c < static_cast<size_t>(k); ++c) {
      if (count[c] == 0) {  // emptied: restart at the point farthest from its own centroid
        size_t far = 0;
        double far_d = -1.0;
        for (size_t i = 0; i < points.size(); ++i) {
          const double d = SquaredDistance(points[i], m.centroids[static_cast<size_t>(assign[i])]);
          if (d > far_d) {
            far_d = d;
            far = i;
          }
        }
        m.centroids[c] = points[far];
        assign[far] = static_cast<int>(c);
        continue;
      }
      for (size_t j = 0; j < dims; ++j) m.centroids[c][j] = static_cast<float>(sum[c][j] / count[c]);
    }
  }
  return m;
}

core::Result<PathRouting> RouteDocuments(const Corpus& corpus, const std::vector<TokenSpan>& train,
                                         const Corpus& val_corpus, const std::vector<TokenSpan>& val_windows,
                                         const RoutingOptions& o) {
  PathRouting r;
  const auto paths = static_cast<size_t>(o.paths);
  r.train.resize(paths);
  r.val.resize(paths);
  r.train_tokens.assign(paths, 0);
  r.val_tokens.assign(paths, 0);
  auto tokens = [](const std::vector<TokenSpan>& spans) {
    int64_t n = 0;
    for (const auto& s : spans) n += s.length;
    return n;
  };
  if (o.paths == 1) {
    r.train[0] = train;
    for (size_t i = 0; i < val_windows.size(); ++i) {
      r.val[0].push_back(i);
      r.val_tokens[0] += val_windows[i].length - 1;
    }
    r.train_tokens[0] = tokens(train);
    return r;
  }
  const std::vector<TokenSpan> docs = CutDocuments(train, o.doc_tokens);
  if (docs.size() < paths) {
    return core::Status::InvalidArgument("dipaco: " + std::to_string(docs.size()) + " training documents of " +
                                         std::to_string(o.doc_tokens) + " tokens for " + std::to_string(paths) +
                                         " paths (fewer paths, shorter documents or more data)");
  }
  std::vector<std::vector<float>> features;
  features.reserve(docs.size());
  for (const auto& d : docs) features.push_back(DocumentFeature(corpus, d, o.feature_tokens));
  r.model = FitKMeans(features, o.paths, o.seed);
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto p = static_cast<size_t>(r.model.Nearest(features[i]));
    r.train[p].push_back(docs[i]);
    r.train_tokens[p] += docs[i].length;
  }
  for (size_t i = 0; i < val_windows.size(); ++i) {
    const TokenSpan& w = val_windows[i];
    const int64_t context = std::min(w.start, o.feature_tokens);
    const TokenSpan before{w.segment, w.start - context, context};
    const auto p = static_cast<size_t>(r.model.Nearest(DocumentFeature(val_corpus, before, o.feature_tokens)));
    r.val[p].push_back(i);
    r.val_tokens[p] += w.length - 1;  // the window's targets
  }
  for (size_t p = 0; p < paths; ++p) {
    if (r.train[p].empty()) {
      return core::Status::InvalidArgument("dipaco: path " + std::to_string(p) + " got no training document");
    }
  }
  return r;
}

DomainRouting RoutingByDomain(const Corpus& corpus, const PathRouting& routing, const std::vector<int>& val_row_domain,
                              int val_domains) {
  const size_t paths = routing.train.size();
  DomainRouting out;
  out.train_tokens.assign(corpus.domains().size(), std::vector<int64_t>(paths, 0));
  out.val_windows.assign(static_cast<size_t>(val_domains), std::vector<int64_t>(paths, 0));
  for (size_t p = 0; p < paths; ++p) {
    for (const TokenSpan& doc : routing.train[p]) {
      out.train_tokens[static_cast<size_t>(corpus.segments()[static_cast<size_t>(doc.segment)].domain)][p] += doc.length;
    }
    for (size_t row : routing.val[p]) {
      if (row < val_row_domain.size()) ++out.val_windows[static_cast<size_t>(val_row_domain[row])][p];
    }
  }
  return out;
}

}  // namespace narrows::trainer
