// The nearest of a few known words to one that is not known, for error messages ("unknown key
// trian (did you mean 'train'?)"): keys, values, profiles, subcommands. Header-only; pure.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace narrows::core {

// " (did you mean 'x'?)" for the choice nearest `word`, where it is near enough to be a slip: at most
// a third of the word's letters edited (at least one), a swap of two neighbours counting as one
// edit (optimal string alignment distance); "" otherwise.
inline std::string DidYouMean(const std::string& word, const std::vector<std::string>& choices) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    return d[a.size()][b.size()];
  };
  const std::string* best = nullptr;
  size_t best_distance = std::max<size_t>(1, word.size() / 3) + 1;
  for (const auto& c : choices) {
    const size_t d = distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = &c;
    }
  }
  return best == nullptr ? "" : " (did you mean '" + *best + "'?)";
}

}  // namespace narrows::core
