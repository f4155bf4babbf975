// DiPaCo's routing (arXiv 2403.10616 §2.3): documents are assigned to paths before training, by
// k-means over a cheap feature of each document's first tokens, and a held-out sequence is scored
// on the path its nearest centroid names. The held-out sequences are the validation windows every
// entry of a scenario is scored on, each routed by its context (the tokens before it), so that
// DiPaCo's loss is over the same tokens as a dense model's and no token is scored that chose its
// path. Here a document is a `document_tokens` piece of a split
// span (the corpus has no document boundaries of its own); its feature is the histogram of its
// first `feature_tokens` tokens' unigrams and bigrams, hashed into kFeatureDims buckets and scaled
// to unit length. Deterministic for (corpus, split, seed): the same on every worker and process.
// Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "trainer/corpus.h"

namespace narrows::trainer {

constexpr int kFeatureDims = 256;

// The spans cut into documents of `doc_tokens` tokens (a span's last, shorter piece joins the
// document before it, or stands alone when it is the span's only one).
std::vector<TokenSpan> CutDocuments(const std::vector<TokenSpan>& spans, int64_t doc_tokens);
// The unit-length hashed unigram+bigram histogram of the document's first `feature_tokens` tokens.
std::vector<float> DocumentFeature(const Corpus& corpus, const TokenSpan& doc, int64_t feature_tokens);

struct KMeans {
  std::vector<std::vector<float>> centroids;
  // The nearest centroid (squared Euclidean distance; ties go to the lower index).
  int Nearest(const std::vector<float>& point) const;
};
// Lloyd's algorithm from a k-means++ start drawn with `seed`, until no point changes cluster (at
// most `iterations` rounds); an emptied cluster restarts at the point farthest from its centroid.
// REQUIRES: 1 <= k <= points.size(), all points of one dimension.
KMeans FitKMeans(const std::vector<std::vector<float>>& points, int k, uint64_t seed, int iterations = 100);

struct PathRouting {
  KMeans model;
  std::vector<std::vector<TokenSpan>> train;     // per path: its training documents
  std::vector<std::vector<size_t>> val;          // per path: the indices of the validation windows routed to it
  std::vector<int64_t> train_tokens, val_tokens;  // per path (validation: the tokens scored)
};
struct RoutingOptions {
  int paths = 1;
  int64_t doc_tokens = 1024;
  int64_t feature_tokens = 256;
  uint64_t seed = 0;
};
// Fits the routing on the training documents and routes each validation window (of `val_corpus`,
// which may be `corpus`) by its context: the feature of the up to `feature_tokens` tokens before it
// in its segment (none at a segment's start: the empty feature, whose nearest centroid is fixed).
// With one path, everything goes to it unchanged (no cutting). InvalidArgument when a path gets no
// training document.
core::Result<PathRouting> RouteDocuments(const Corpus& corpus, const std::vector<TokenSpan>& train,
                                         const Corpus& val_corpus, const std::vector<TokenSpan>& val_windows,
                                         const RoutingOptions& options);

// How a routing lines up with the corpus's domains (its confusion table): per domain of `corpus`,
// the training tokens routed to each path, and per domain of `val_row_domain` (each validation
// window's domain, as PathRouting::val indexes them) the windows routed to each path.
struct DomainRouting {
  std::vector<std::vector<int64_t>> train_tokens;  // [domain][path]
  std::vector<std::vector<int64_t>> val_windows;   // [domain][path]
};
DomainRouting RoutingByDomain(const Corpus& corpus, const PathRouting& routing, const std::vector<int>& val_row_domain,
                              int val_domains);

}  // namespace narrows::trainer
