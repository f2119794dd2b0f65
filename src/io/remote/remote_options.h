// The part of resolve_remote_options() that needs no environment: the documented defaults of
// the limits, for URLs (plain HTTP(S)) that need no credentials, region or endpoint.
#pragma once

#include "stoker/remote_source.h"

namespace stoker::io {

/// `options` with every unset limit (zero, or -1 for read_through_gap_bytes) at its default.
RemoteOptions with_default_limits(RemoteOptions options);

}  // namespace stoker::io
