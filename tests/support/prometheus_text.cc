#include "tests/support/prometheus_text.h"

#include <cstdlib>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/loop_device.h"

namespace blockread::testing {
namespace {

absl::Status Bad(int line_number, const std::string& line, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("exposition line ", line_number, ": ", why, ": ", line));
}

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

}  // namespace

double Exposition::Value(const std::string& name, const Labels& labels) const {
  auto family = samples.find(name);
  if (family == samples.end()) return 0;
  auto sample = family->second.find(labels);
  return sample == family->second.end() ? 0 : sample->second;
}

bool Exposition::Has(const std::string& name, const Labels& labels) const {
  auto family = samples.find(name);
  return family != samples.end() && family->second.contains(labels);
}

absl::StatusOr<Exposition> ParseExposition(const std::string& text) {
  Exposition out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      if (words.size() >= 4 && words[1] == "TYPE") out.types[words[2]] = words[3];
      continue;
    }
    size_t pos = 0;
    while (pos < line.size() && IsNameChar(line[pos], pos == 0)) ++pos;
    if (pos == 0) return Bad(number, line, "no metric name");
    const std::string name = line.substr(0, pos);
    Labels labels;
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      while (pos < line.size() && line[pos] != '}') {
        const size_t eq = line.find("=\"", pos);
        if (eq == std::string::npos) return Bad(number, line, "label without =\"");
        const std::string key = line.substr(pos, eq - pos);
        std::string value;
        pos = eq + 2;
        for (; pos < line.size() && line[pos] != '"'; ++pos) {
          if (line[pos] == '\\' && pos + 1 < line.size()) {
            ++pos;
            value.push_back(line[pos] == 'n' ? '\n' : line[pos]);
          } else {
            value.push_back(line[pos]);
          }
        }
        if (pos >= line.size()) return Bad(number, line, "unterminated label value");
        ++pos;  // closing quote
        if (pos < line.size() && line[pos] == ',') ++pos;
        if (!labels.emplace(key, value).second) return Bad(number, line, "repeated label");
      }
      if (pos >= line.size()) return Bad(number, line, "unterminated label set");
      ++pos;  // '}'
    }
    if (pos >= line.size() || line[pos] != ' ') return Bad(number, line, "no value");
    const std::string value_text = line.substr(pos + 1, line.find(' ', pos + 1) - pos - 1);
    double value = 0;
    if (value_text == "+Inf") {
      value = HUGE_VAL;
    } else if (value_text == "-Inf") {
      value = -HUGE_VAL;
    } else if (value_text == "Nan" || value_text == "NaN") {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (!absl::SimpleAtod(value_text, &value)) {
      return Bad(number, line, "value is not a number");
    }
    if (!out.samples[name].emplace(std::move(labels), value).second) {
      return Bad(number, line, "sample repeated");
    }
  }
  return out;
}

absl::StatusOr<Exposition> Scrape(int port) {
  auto text =
      RunCommand(absl::StrCat("curl -sS --fail --max-time 10 http://127.0.0.1:", port, "/metrics"));
  if (!text.ok()) return text.status();
  return ParseExposition(*text);
}

}  // namespace blockread::testing
