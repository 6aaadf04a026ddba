#include "client/units.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace blockread::client {

absl::StatusOr<uint64_t> ParseByteCount(absl::string_view text) {
  absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < trimmed.size() && absl::ascii_isdigit(trimmed[digits])) ++digits;
  uint64_t value = 0;
  if (digits == 0 || !absl::SimpleAtoi(trimmed.substr(0, digits), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte count"));
  }
  const std::string unit = absl::AsciiStrToLower(trimmed.substr(digits));
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    shift = 40;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': unknown unit '", unit, "' (use k, m, g or t)"));
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' overflows 64 bits"));
  }
  return value << shift;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f%s", bytes, units[u])
                : absl::StrFormat("%.4g%s", bytes, units[u]);
}

}  // namespace blockread::client
