// What `stoker shard` checks of each member before it goes into a shard: that the loader will
// read it. A broken image written into a shard is only found by a later `stoker check`, or by a
// training run under on_error="raise" that stops mid-epoch; decoding it once as it is written
// costs less than the epochs it saves.
//
// Thread-safety: a pure function; any number of threads may call it at once (image decoders
// are per thread). Ownership: `bytes` is borrowed for the call.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "stoker/status.h"

namespace stoker {

/// The kinds of member check_member reads, told by the last extension of a field ("seg.png" is
/// an image): images (jpg, jpeg, png, webp: decoded whole), json (one json object, as
/// stoker.Json reads it), text (txt, text: UTF-8), npy (an array, as stoker.Array reads it),
/// cls (an integer label). Anything else (clips, other files) is not checked.
enum class MemberKind { kUnchecked, kImage, kJson, kText, kNpy, kLabel };
MemberKind member_kind(std::string_view field);

/// OK when `bytes` can be read as a member of `field`'s kind (and for kUnchecked); else
/// kCorruptData (or kUnsupported, kResourceExhausted for images) saying what is wrong, in the
/// loader's words, without a name (the caller names the file).
Status check_member(std::string_view field, std::span<const uint8_t> bytes);

}  // namespace stoker
