#include "stoker/member_check.h"

#include <cctype>
#include <string>

#include "dataset/shard_members.h"
#include "stoker/image_decoder.h"

namespace stoker {

MemberKind member_kind(std::string_view field) {
  const size_t dot = field.rfind('.');
  std::string extension(dot == std::string_view::npos ? field : field.substr(dot + 1));
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (extension == "jpg" || extension == "jpeg" || extension == "png" || extension == "webp") {
    return MemberKind::kImage;
  }
  if (extension == "json") return MemberKind::kJson;
  if (extension == "txt" || extension == "text") return MemberKind::kText;
  if (extension == "npy") return MemberKind::kNpy;
  if (extension == "cls") return MemberKind::kLabel;
  return MemberKind::kUnchecked;
}

Status check_member(std::string_view field, std::span<const uint8_t> bytes) {
  switch (member_kind(field)) {
    case MemberKind::kImage: {
      // Decoded whole, as a training run's first epoch would: a truncated scan or damaged
      // pixel data shows only here, never in the header.
      Result<DecodedImage> image = decode_image(bytes);
      return image.ok() ? Status() : image.status();
    }
    // The loader's own decoders of small members, by the field the extension names.
    case MemberKind::kJson:
      return decode_member(MemberDecoder::kJson, bytes).status();
    case MemberKind::kText:
      return decode_member(MemberDecoder::kText, bytes).status();
    case MemberKind::kNpy:
      return decode_member(MemberDecoder::kArray, bytes).status();
    case MemberKind::kLabel:
      return decode_member(MemberDecoder::kLabel, bytes).status();
    case MemberKind::kUnchecked:
      break;
  }
  return Status();
}

}  // namespace stoker
