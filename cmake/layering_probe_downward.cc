// Built by ctest (layering tests): a media-layer file may include media's own headers and
// those of the layers below it, public and private. This one must build.
#include "core/file.h"
#include "media/container.h"
#include "stoker/byte_source.h"
#include "stoker/status.h"
#include "stoker/video_reader.h"
