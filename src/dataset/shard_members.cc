#include "dataset/shard_members.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "stoker/dtype.h"

namespace stoker {
namespace {

constexpr int kMaxJsonDepth = 512;  // Python's json gives up (RecursionError) about there

Status corrupt(std::string message) { return Status(StatusCode::kCorruptData, std::move(message)); }

std::string_view text_of(MemberBytes member) {
  return std::string_view(reinterpret_cast<const char*>(member.data()), member.size());
}

// "<what> <digits> lies outside int64 [min, max]", long digit strings abbreviated.
Status outside_int64(const std::string& what, std::string digits) {
  if (digits.size() > 40) {
    digits = digits.substr(0, 20) + "..." + digits.substr(digits.size() - 8) + " (" +
             std::to_string(digits.size()) + " digits)";
  }
  return corrupt(what + " " + digits + " lies outside int64 [" +
                 std::to_string(std::numeric_limits<int64_t>::min()) + ", " +
                 std::to_string(std::numeric_limits<int64_t>::max()) + "]");
}

// Decimal digits with an optional sign as an int64; false on overflow.
bool parse_int64(std::string_view digits, int64_t* out) {
  bool negative = false;
  size_t k = 0;
  if (k < digits.size() && (digits[k] == '-' || digits[k] == '+')) negative = digits[k++] == '-';
  if (k == digits.size()) return false;
  uint64_t value = 0;
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  for (; k < digits.size(); ++k) {
    if (digits[k] < '0' || digits[k] > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(digits[k] - '0');
    if (value > (limit - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = negative ? static_cast<int64_t>(0 - value) : static_cast<int64_t>(value);
  return true;
}

// The length of the UTF-8 sequence at `p` (1..4), or 0 when it is not a valid one; `why` says
// what is wrong as Python's codec does.
size_t utf8_sequence(const uint8_t* p, size_t left, const char** why) {
  const uint8_t b = p[0];
  if (b < 0x80) return 1;
  size_t length;
  uint32_t low = 0x80, high = 0xbf;  // the second byte's bounds
  if (b >= 0xc2 && b <= 0xdf) {
    length = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    length = 3;
    if (b == 0xe0) low = 0xa0;
    if (b == 0xed) high = 0x9f;  // no surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    length = 4;
    if (b == 0xf0) low = 0x90;
    if (b == 0xf4) high = 0x8f;
  } else {
    *why = "invalid start byte";
    return 0;
  }
  for (size_t k = 1; k < length; ++k) {
    if (k >= left) {
      *why = "unexpected end of data";
      return 0;
    }
    const uint8_t c = p[k];
    if (c < (k == 1 ? low : 0x80) || c > (k == 1 ? high : 0xbf)) {
      *why = "invalid continuation byte";
      return 0;
    }
  }
  return length;
}

void append_utf8(uint32_t code, std::string* out) {
  if (code < 0x80) {
    *out += static_cast<char>(code);
  } else if (code < 0x800) {
    *out += static_cast<char>(0xc0 | (code >> 6));
    *out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {  // lone surrogates too: Python keeps them
    *out += static_cast<char>(0xe0 | (code >> 12));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (code >> 18));
    *out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

// ---- .npy ------------------------------------------------------------------------------

struct NumpyType {
  const char* code;  // kind and size, e.g. "f4"
  const char* name;
};
constexpr NumpyType kNumpyTypes[] = {
    {"b1", "bool"},   {"i1", "int8"},    {"i2", "int16"},   {"i4", "int32"},
    {"i8", "int64"},  {"u1", "uint8"},   {"u2", "uint16"},  {"u4", "uint32"},
    {"u8", "uint64"}, {"f2", "float16"}, {"f4", "float32"}, {"f8", "float64"},
};

uint32_t little_endian(const uint8_t* p, int bytes) {
  uint32_t value = 0;
  for (int k = bytes - 1; k >= 0; --k) value = value << 8 | p[k];
  return value;
}

// The array names of an .npz (zip) archive, from its central directory, as Python lists them.
std::string npz_names(MemberBytes member) {
  std::vector<std::string> names;
  const size_t n = member.size();
  for (size_t end = n >= 22 ? n - 22 : 0; end + 22 <= n && end + 65557 >= n; --end) {
    if (std::memcmp(member.data() + end, "PK\x05\x06", 4) == 0) {
      const uint32_t count = little_endian(member.data() + end + 10, 2);
      size_t at = little_endian(member.data() + end + 16, 4);
      for (uint32_t e = 0; e < count && names.size() < 5 && at + 46 <= n; ++e) {
        if (std::memcmp(member.data() + at, "PK\x01\x02", 4) != 0) break;
        const size_t name = little_endian(member.data() + at + 28, 2);
        const size_t extra = little_endian(member.data() + at + 30, 2);
        const size_t comment = little_endian(member.data() + at + 32, 2);
        if (at + 46 + name > n) break;
        std::string file(reinterpret_cast<const char*>(member.data() + at + 46), name);
        if (file.size() > 4 && file.ends_with(".npy")) file.resize(file.size() - 4);
        names.push_back(std::move(file));
        at += 46 + name + extra + comment;
      }
      break;
    }
    if (end == 0) break;
  }
  std::string out = "[";
  for (size_t k = 0; k < names.size(); ++k) out += (k ? ", " : "") + python_repr(names[k]);
  return out + "]";
}

// The value of `key` in a .npy header's dict literal: its text, up to the next top-level comma.
bool header_value(std::string_view header, std::string_view key, std::string_view* value) {
  for (const char quote : {'\'', '"'}) {
    const std::string quoted = std::string(1, quote) + std::string(key) + quote;
    size_t at = header.find(quoted);
    if (at == std::string_view::npos) continue;
    at = header.find(':', at + quoted.size());
    if (at == std::string_view::npos) return false;
    size_t begin = at + 1;
    while (begin < header.size() && header[begin] == ' ') ++begin;
    size_t end = begin;
    int depth = 0;
    for (; end < header.size(); ++end) {
      const char c = header[end];
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if ((c == ',' || c == '}') && depth == 0) break;
    }
    *value = header.substr(begin, end - begin);
    while (!value->empty() && value->back() == ' ') value->remove_suffix(1);
    return true;
  }
  return false;
}

Status not_npy(const std::string& why) { return corrupt("not a .npy array: " + why); }

}  // namespace

std::string python_repr(std::string_view text) {
  const bool double_quoted =
      text.find('\'') != std::string_view::npos && text.find('"') == std::string_view::npos;
  const char quote = double_quoted ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\' || c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      static const char* const kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out + quote;
}

std::string python_shape(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t k = 0; k < shape.size(); ++k) {
    out += (k ? ", " : "") + std::to_string(shape[k]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

Result<int64_t> decode_label(MemberBytes member) {
  std::string_view text = text_of(member);
  auto refuse = [&] {
    std::string shown(text.substr(0, 40));
    return corrupt("a cls member holds an integer, not " + python_repr(shown));
  };
  for (const uint8_t byte : member) {
    if (byte >= 0x80) return refuse();
  }
  const auto space = [](char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  std::string digits;
  size_t k = 0;
  if (k < text.size() && (text[k] == '+' || text[k] == '-')) digits += text[k++];
  bool previous_digit = false;
  for (; k < text.size(); ++k) {
    const char c = text[k];
    if (c >= '0' && c <= '9') {
      digits += c;
      previous_digit = true;
    } else if (c == '_' && previous_digit && k + 1 < text.size() && text[k + 1] >= '0' &&
               text[k + 1] <= '9') {
      previous_digit = false;
    } else {
      return refuse();
    }
  }
  const size_t first = digits.empty() || digits[0] == '+' || digits[0] == '-' ? 1 : 0;
  if (digits.size() <= first) return refuse();
  // Python's int() refuses leading zeros only in literals; int("007") is 7.
  int64_t value = 0;
  if (!parse_int64(digits, &value)) {
    std::string shown = digits[0] == '+' ? digits.substr(1) : digits;
    return outside_int64("the cls label", shown);
  }
  return value;
}

Status check_utf8(MemberBytes member) {
  for (size_t k = 0; k < member.size();) {
    const char* why = "";
    const size_t length = utf8_sequence(member.data() + k, member.size() - k, &why);
    if (length == 0) {
      static const char* const kHex = "0123456789abcdef";
      const uint8_t byte = member[k];
      return corrupt(std::string("'utf-8' codec can't decode byte 0x") + kHex[byte >> 4] +
                     kHex[byte & 15] + " in position " + std::to_string(k) + ": " + why);
    }
    k += length;
  }
  return Status();
}

int64_t NpyArray::elements() const {
  // A zero dimension first: parse_npy bounds the product of non-zero ones by the member's size,
  // not the partial products of a shape such as (huge, huge, 0).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

void NpyArray::copy_to(uint8_t* out) const {
  const int64_t n = elements();
  const auto item = static_cast<int64_t>(item_bytes);
  auto put = [&](int64_t to, int64_t from) {
    const uint8_t* source = data.data() + from * item;
    uint8_t* target = out + to * item;
    if (byte_swapped) {
      for (int64_t b = 0; b < item; ++b) target[b] = source[item - 1 - b];
    } else {
      std::memcpy(target, source, item_bytes);
    }
  };
  if (!fortran_order || shape.size() < 2) {
    for (int64_t k = 0; k < n; ++k) put(k, k);
    return;
  }
  // C-order position k has the multi-index whose Fortran-order position is stored at `from`.
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t from = 0, stride = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      from += index[d] * stride;
      stride *= shape[d];
    }
    put(k, from);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

Result<NpyArray> parse_npy(MemberBytes member) {
  if (member.empty()) return corrupt("the member is empty (zero bytes), not a .npy array");
  if (member.size() >= 4 && std::memcmp(member.data(), "PK\x03\x04", 4) == 0) {
    return corrupt("an .npz archive (arrays " + npz_names(member) + "), not a .npy array");
  }
  if (member.size() < 10 || std::memcmp(member.data(), "\x93NUMPY", 6) != 0) {
    return not_npy("the member does not start with the .npy magic string");
  }
  const int major = member[6];
  if (major < 1 || major > 3) return not_npy("format version " + std::to_string(major));
  const int length_bytes = major == 1 ? 2 : 4;
  if (member.size() < static_cast<size_t>(8 + length_bytes)) return not_npy("a cut header");
  const size_t header_length = little_endian(member.data() + 8, length_bytes);
  const size_t data_start = 8 + length_bytes + header_length;
  if (data_start > member.size()) return not_npy("the header runs past the member's end");
  const std::string_view header(reinterpret_cast<const char*>(member.data()) + 8 + length_bytes,
                                header_length);

  NpyArray array;
  std::string_view descr, fortran, shape;
  if (!header_value(header, "descr", &descr) || !header_value(header, "fortran_order", &fortran) ||
      !header_value(header, "shape", &shape)) {
    return not_npy("the header lacks descr, fortran_order or shape");
  }
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front()) {
    return not_npy("a structured dtype " + std::string(descr) + ", not one array of numbers");
  }
  descr = descr.substr(1, descr.size() - 2);
  char order = '|';
  if (!descr.empty() && std::string_view("<>|=").find(descr[0]) != std::string_view::npos) {
    order = descr[0];
    descr.remove_prefix(1);
  }
  if (descr.starts_with("O")) {
    return not_npy("Object arrays cannot be loaded when allow_pickle=False");
  }
  for (const NumpyType& type : kNumpyTypes) {
    if (descr == type.code) array.dtype = type.name;
  }
  if (descr.size() >= 2 && (descr[0] == 'U' || descr[0] == 'S')) {
    array.dtype = std::string(1, descr[0]) + std::string(descr.substr(1));  // kept for errors
  }
  if (array.dtype.empty()) return not_npy("dtype '" + std::string(descr) + "' is not supported");
  int64_t count = 0;
  // numpy's item sizes fit in an int32; 2^40 bounds 4 * count far from overflow.
  if (!parse_int64(descr.substr(1), &count) || count < 1 || count > (int64_t{1} << 40)) {
    return not_npy("a bad dtype");
  }
  array.item_bytes = static_cast<size_t>(descr[0] == 'U' ? 4 * count : count);
  array.byte_swapped = order == '>' && array.item_bytes > 1 && descr[0] != 'S';
  if (fortran == "True") {
    array.fortran_order = true;
  } else if (fortran != "False") {
    return not_npy("fortran_order is " + std::string(fortran));
  }
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    return not_npy("the shape " + std::string(shape) + " is no tuple");
  }
  shape = shape.substr(1, shape.size() - 2);
  while (!shape.empty()) {
    while (!shape.empty() && (shape.front() == ' ' || shape.front() == ',')) shape.remove_prefix(1);
    size_t end = 0;
    while (end < shape.size() && shape[end] >= '0' && shape[end] <= '9') ++end;
    if (end == 0) {
      if (shape.empty()) break;
      return not_npy("a shape of other than integers");
    }
    int64_t dim = 0;
    if (!parse_int64(shape.substr(0, end), &dim) || dim > (int64_t{1} << 40)) {
      return not_npy("a shape too large");
    }
    array.shape.push_back(dim);
    shape.remove_prefix(end);
  }
  // The values' bytes, checked against overflow of the product.
  long double total = static_cast<long double>(array.item_bytes);
  for (int64_t dim : array.shape) total *= static_cast<long double>(dim);
  const size_t available = member.size() - data_start;
  if (total > static_cast<long double>(available)) {
    const std::string needed = total < 0x1p63L ? std::to_string(static_cast<uint64_t>(total))
                                               : std::string("more than 2^63");
    return not_npy("its shape needs " + needed + " bytes of values, the member holds " +
                   std::to_string(available));
  }
  array.data = member.subspan(data_start, static_cast<size_t>(total));
  return array;
}

Result<TokenArray> decode_tokens(MemberBytes member, int64_t max_length) {
  STOKER_ASSIGN_OR_RETURN(NpyArray array, parse_npy(member));
  const bool integer = array.dtype.starts_with("int") || array.dtype.starts_with("uint");
  if (!integer) {
    // numpy's dtype.str: the byte order and code as stored ('|' for one byte).
    const size_t item = array.item_bytes;
    std::string code;
    if (array.dtype == "bool")
      code = "|b1";
    else if (array.dtype.starts_with("float"))
      code = "<f" + std::to_string(item);
    else if (array.dtype[0] == 'U')
      code = "<U" + std::to_string(item / 4);
    else
      code = "|S" + std::to_string(item);
    const std::string name = array.dtype[0] == 'U'   ? "<U" + std::to_string(item / 4)
                             : array.dtype[0] == 'S' ? "|S" + std::to_string(item)
                                                     : array.dtype;
    return corrupt("token ids are an integer array, this one is " + name + " (" + code + ")");
  }
  if (array.shape.size() != 1) {
    return corrupt("a token array is 1-D, this one has shape " + python_shape(array.shape));
  }
  int64_t n = array.shape[0];
  std::vector<uint8_t> values(static_cast<size_t>(n) * array.item_bytes);
  array.copy_to(values.data());
  TokenArray tokens{.dtype = array.dtype, .values = {}};
  if (max_length > 0) n = std::min(n, max_length);
  tokens.values.resize(static_cast<size_t>(n));
  const bool is_unsigned = array.dtype[0] == 'u';
  for (int64_t k = 0; k < array.shape[0]; ++k) {
    const uint8_t* p = values.data() + k * array.item_bytes;
    int64_t value = 0;
    switch (array.item_bytes) {
      case 1:
        value = is_unsigned ? int64_t{*p} : int64_t{static_cast<int8_t>(*p)};
        break;
      case 2: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        value = is_unsigned ? int64_t{v} : int64_t{static_cast<int16_t>(v)};
        break;
      }
      case 4: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        value = is_unsigned ? int64_t{v} : int64_t{static_cast<int32_t>(v)};
        break;
      }
      default: {
        uint64_t v;
        std::memcpy(&v, p, 8);
        // Every id is checked, kept or not, as the whole array's maximum was.
        if (is_unsigned && v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return outside_int64("the token id", std::to_string(v));
        }
        value = static_cast<int64_t>(v);
      }
    }
    if (k < n) tokens.values[k] = value;
  }
  return tokens;
}

std::string token_batch_dtype(std::span<const std::string> dtypes, int64_t pad) {
  // An integer type as (signed, bits); numpy's promotion of two: the larger of one
  // signedness; a signed wider than the unsigned; else a signed of twice the unsigned's bits,
  // past 64 bits a float (which the batch holds as int64).
  struct Type {
    bool is_signed;
    int bits;
  };
  auto promote = [](Type a, Type b) -> Type {
    if (a.is_signed == b.is_signed) return {a.is_signed, std::max(a.bits, b.bits)};
    const Type s = a.is_signed ? a : b, u = a.is_signed ? b : a;
    if (s.bits > u.bits) return s;
    return {true, u.bits * 2};  // 128: no integer type
  };
  Type pad_type{pad < 0, 8};
  for (const int bits : {8, 16, 32, 64}) {
    const int64_t high =
        bits == 64 ? std::numeric_limits<int64_t>::max()
                   : (pad < 0 ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1);
    const int64_t low =
        bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
    if (pad <= high && pad >= low) {
      pad_type.bits = bits;
      break;
    }
  }
  Type result = pad_type;
  for (const std::string& dtype : dtypes) {
    const bool is_signed = dtype.starts_with("int");
    const int bits = std::atoi(dtype.c_str() + (is_signed ? 3 : 4));
    result = promote(result, Type{is_signed, bits});
  }
  if (result.bits > 64) return "int64";
  return std::string(result.is_signed ? "int" : "uint") + std::to_string(result.bits);
}

// ---- json ------------------------------------------------------------------------------

namespace {

// A recursive-descent reader of one json document; keeps the top-level object's values.
class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  enum class Type { kNull, kBool, kInteger, kFloat, kString, kArray, kObject };
  struct Value {
    Type type = Type::kNull;
    std::string_view raw;  // the value's text
    bool boolean = false;
    std::string string;
  };

  // The document's top-level value, its members when an object (the last of duplicates).
  Status read(Value* top, std::vector<std::pair<std::string, Value>>* members) {
    skip_space();
    STOKER_RETURN_IF_ERROR(value(0, top, members));
    skip_space();
    if (at_ < text_.size()) return fail("Extra data");
    return Status();
  }

 private:
  Status fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t k = 0; k < at_ && k < text_.size(); ++k) {
      if (text_[k] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return corrupt(what + ": line " + std::to_string(line) + " column " + std::to_string(column) +
                   " (char " + std::to_string(at_) + ")");
  }

  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }

  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  Status value(int depth, Value* out, std::vector<std::pair<std::string, Value>>* members) {
    if (depth > kMaxJsonDepth) return fail("Nested too deeply");
    if (at_ >= text_.size()) return fail("Expecting value");
    const size_t begin = at_;
    const char c = text_[at_];
    Status status;
    if (c == '{') {
      out->type = Type::kObject;
      status = object(depth, members);
    } else if (c == '[') {
      out->type = Type::kArray;
      status = array(depth);
    } else if (c == '"') {
      out->type = Type::kString;
      status = string(&out->string);
    } else if (literal("true") || literal("false")) {
      out->type = Type::kBool;
      out->boolean = text_[begin] == 't';
    } else if (literal("null")) {
      out->type = Type::kNull;
    } else if (literal("NaN") || literal("Infinity") || literal("-Infinity")) {
      out->type = Type::kFloat;
    } else {
      status = number(&out->type);
    }
    out->raw = text_.substr(begin, at_ - begin);
    return status;
  }

  Status object(int depth, std::vector<std::pair<std::string, Value>>* members) {
    ++at_;  // {
    skip_space();
    if (at_ < text_.size() && text_[at_] == '}') {
      ++at_;
      return Status();
    }
    while (true) {
      skip_space();
      if (at_ >= text_.size() || text_[at_] != '"') {
        return fail("Expecting property name enclosed in double quotes");
      }
      std::string key;
      STOKER_RETURN_IF_ERROR(string(&key));
      skip_space();
      if (at_ >= text_.size() || text_[at_] != ':') return fail("Expecting ':' delimiter");
      ++at_;
      skip_space();
      Value item;
      STOKER_RETURN_IF_ERROR(value(depth + 1, &item, nullptr));
      if (members != nullptr) {
        auto same = std::find_if(members->begin(), members->end(),
                                 [&](const auto& member) { return member.first == key; });
        if (same != members->end()) {
          same->second = std::move(item);
        } else {
          members->emplace_back(std::move(key), std::move(item));
        }
      }
      skip_space();
      if (at_ < text_.size() && text_[at_] == ',') {
        ++at_;
        continue;
      }
      if (at_ < text_.size() && text_[at_] == '}') {
        ++at_;
        return Status();
      }
      return fail("Expecting ',' delimiter");
    }
  }

  Status array(int depth) {
    ++at_;  // [
    skip_space();
    if (at_ < text_.size() && text_[at_] == ']') {
      ++at_;
      return Status();
    }
    while (true) {
      skip_space();
      Value item;
      STOKER_RETURN_IF_ERROR(value(depth + 1, &item, nullptr));
      skip_space();
      if (at_ < text_.size() && text_[at_] == ',') {
        ++at_;
        continue;
      }
      if (at_ < text_.size() && text_[at_] == ']') {
        ++at_;
        return Status();
      }
      return fail("Expecting ',' delimiter");
    }
  }

  Status hex4(uint32_t* out) {
    if (at_ + 4 > text_.size()) return fail("Invalid \\uXXXX escape");
    uint32_t value = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = text_[at_ + k];
      const int digit = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
      if (digit < 0) return fail("Invalid \\uXXXX escape");
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    at_ += 4;
    *out = value;
    return Status();
  }

  Status string(std::string* out) {
    ++at_;  // "
    while (true) {
      if (at_ >= text_.size()) return fail("Unterminated string starting at");
      const char c = text_[at_];
      if (c == '"') {
        ++at_;
        return Status();
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("Invalid control character at");
      if (c != '\\') {
        *out += c;
        ++at_;
        continue;
      }
      if (++at_ >= text_.size()) return fail("Unterminated string starting at");
      const char escape = text_[at_++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          *out += escape;
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          uint32_t code = 0;
          STOKER_RETURN_IF_ERROR(hex4(&code));
          if (code >= 0xd800 && code <= 0xdbff && text_.substr(at_, 2) == "\\u") {
            const size_t mark = at_;
            at_ += 2;
            uint32_t low = 0;
            STOKER_RETURN_IF_ERROR(hex4(&low));
            if (low >= 0xdc00 && low <= 0xdfff) {
              code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            } else {
              at_ = mark;  // a lone high surrogate, then another escape
            }
          }
          append_utf8(code, out);
          break;
        }
        default:
          --at_;
          return fail("Invalid \\escape");
      }
    }
  }

  Status number(Type* type) {
    const size_t begin = at_;
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      return at_ - from;
    };
    if (at_ < text_.size() && text_[at_] == '0') {
      ++at_;
    } else if (digits() == 0) {
      at_ = begin;
      return fail("Expecting value");
    }
    *type = Type::kInteger;
    if (at_ + 1 < text_.size() && text_[at_] == '.' && text_[at_ + 1] >= '0' &&
        text_[at_ + 1] <= '9') {
      ++at_;
      digits();
      *type = Type::kFloat;
    }
    if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
      const size_t mark = at_++;
      if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
      if (digits() == 0) {
        at_ = mark;  // Python stops the number before a bare 'e'
      } else {
        *type = Type::kFloat;
      }
    }
    return Status();
  }

  std::string_view text_;
  size_t at_ = 0;
};

const char* python_type(JsonReader::Type type) {
  switch (type) {
    case JsonReader::Type::kNull:
      return "NoneType";
    case JsonReader::Type::kBool:
      return "bool";
    case JsonReader::Type::kInteger:
      return "int";
    case JsonReader::Type::kFloat:
      return "float";
    case JsonReader::Type::kString:
      return "str";
    case JsonReader::Type::kArray:
      return "list";
    case JsonReader::Type::kObject:
      return "dict";
  }
  return "object";
}

const char* kind_name(JsonKind kind) {
  switch (kind) {
    case JsonKind::kInt64:
      return "int64";
    case JsonKind::kFloat64:
      return "float64";
    case JsonKind::kFloat32:
      return "float32";
    case JsonKind::kBool:
      return "bool";
    case JsonKind::kString:
      return "str";
  }
  return "";
}

// A value as Python's repr() shows it; containers and numbers by their json text.
std::string repr_of(const JsonReader::Value& value) {
  switch (value.type) {
    case JsonReader::Type::kNull:
      return "None";
    case JsonReader::Type::kBool:
      return value.boolean ? "True" : "False";
    case JsonReader::Type::kString:
      return python_repr(value.string);
    default:
      return std::string(value.raw);
  }
}

double json_float(std::string_view raw) {
  if (raw == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (raw == "Infinity") return std::numeric_limits<double>::infinity();
  if (raw == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::strtod(std::string(raw).c_str(), nullptr);
}

}  // namespace

Result<JsonKind> json_kind_named(std::string_view name) {
  if (name == "int64") return JsonKind::kInt64;
  if (name == "float64") return JsonKind::kFloat64;
  if (name == "float32") return JsonKind::kFloat32;
  if (name == "bool") return JsonKind::kBool;
  if (name == "str") return JsonKind::kString;
  return Status(StatusCode::kInvalidArgument, "json key type '" + std::string(name) +
                                                  "' is none of int64, float64, float32, bool, "
                                                  "str");
}

Status decode_json(MemberBytes member, std::span<const JsonKey> keys, std::span<JsonValue> out) {
  if (member.size() >= 3 && std::memcmp(member.data(), "\xef\xbb\xbf", 3) == 0) {
    member = member.subspan(3);  // a UTF-8 byte order mark, as Python's json.loads(bytes)
  }
  STOKER_RETURN_IF_ERROR(check_utf8(member));
  JsonReader reader(text_of(member));
  JsonReader::Value top;
  std::vector<std::pair<std::string, JsonReader::Value>> members;
  STOKER_RETURN_IF_ERROR(reader.read(&top, &members));
  if (top.type != JsonReader::Type::kObject) {
    return corrupt(std::string("the json holds a ") + python_type(top.type) + ", not an object");
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    const JsonKey& key = keys[k];
    const auto found = std::find_if(members.begin(), members.end(),
                                    [&](const auto& member) { return member.first == key.name; });
    if (found == members.end()) {
      return corrupt("\"the json has no key " + python_repr(key.name) + "\"");
    }
    const JsonReader::Value& value = found->second;
    const std::string named = "the json's " + python_repr(key.name);
    const bool number =
        value.type == JsonReader::Type::kInteger || value.type == JsonReader::Type::kFloat;
    const bool fits = key.kind == JsonKind::kString  ? value.type == JsonReader::Type::kString
                      : key.kind == JsonKind::kBool  ? value.type == JsonReader::Type::kBool
                      : key.kind == JsonKind::kInt64 ? value.type == JsonReader::Type::kInteger
                                                     : number;
    if (!fits) {
      return corrupt(named + " is " + repr_of(value) + ", not a " + kind_name(key.kind));
    }
    JsonValue& result = out[k];
    switch (key.kind) {
      case JsonKind::kString:
        result.string_value = value.string;
        break;
      case JsonKind::kBool:
        result.bool_value = value.boolean;
        break;
      case JsonKind::kInt64:
        if (!parse_int64(value.raw, &result.int_value)) {
          return outside_int64(named, std::string(value.raw));
        }
        break;
      case JsonKind::kFloat64:
      case JsonKind::kFloat32: {
        result.float_value = json_float(value.raw);
        // Python's float() of an int too large for a double overflows; a float literal is inf.
        if (value.type == JsonReader::Type::kInteger && std::isinf(result.float_value)) {
          return corrupt(named + " is an integer beyond any " + kind_name(key.kind));
        }
        break;
      }
    }
  }
  return Status();
}

Result<MemberSummary> decode_member(MemberDecoder decoder, MemberBytes member,
                                    std::span<const JsonKey> keys) {
  switch (decoder) {
    case MemberDecoder::kLabel:
      STOKER_RETURN_IF_ERROR(decode_label(member).status());
      return MemberSummary{};
    case MemberDecoder::kText:
      STOKER_RETURN_IF_ERROR(check_utf8(member));
      return MemberSummary{};
    case MemberDecoder::kTokens: {
      STOKER_ASSIGN_OR_RETURN(TokenArray tokens, decode_tokens(member, 0));
      const auto length = static_cast<int64_t>(tokens.values.size());
      return MemberSummary{.dtype = std::move(tokens.dtype), .shape = {length}};
    }
    case MemberDecoder::kArray: {
      STOKER_ASSIGN_OR_RETURN(NpyArray array, parse_npy(member));
      DType type;
      if (!dtype_from_name(array.dtype, &type)) {
        return corrupt("an array of dtype " + array.dtype + ", which batches cannot hold");
      }
      return MemberSummary{.dtype = std::move(array.dtype), .shape = std::move(array.shape)};
    }
    case MemberDecoder::kJson: {
      std::vector<JsonValue> values(keys.size());
      STOKER_RETURN_IF_ERROR(decode_json(member, keys, values));
      return MemberSummary{};
    }
  }
  return Status(StatusCode::kInternal, "an unknown member decoder");
}

}  // namespace stoker
