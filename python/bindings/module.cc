// stoker._core: the compiled half of the stoker package. Argument checking and friendly
// defaults live in the Python wrappers (python/stoker/); this layer converts types, releases
// the GIL around every call that does work, and turns Status into exceptions.
#include <nanobind/nanobind.h>
#include <pthread.h>

#include "errors.h"

namespace stoker::python {
void register_core(nanobind::module_& m);
void register_dataset(nanobind::module_& m);
void register_etl(nanobind::module_& m);
void register_image(nanobind::module_& m);
void register_io(nanobind::module_& m);
void register_media(nanobind::module_& m);
void register_pipeline(nanobind::module_& m);
void register_sampling(nanobind::module_& m);
void register_shards(nanobind::module_& m);
void register_transform(nanobind::module_& m);
}  // namespace stoker::python

namespace {

// A forked child exits without freeing what the parent's other threads held (CPython never
// frees their frames): nanobind's leak report at exit would only be noise there.
void after_fork_in_child() { nanobind::set_leak_warnings(false); }

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "stoker's C++ core";
  pthread_atfork(nullptr, nullptr, &after_fork_in_child);
  stoker::python::register_errors(m);
  stoker::python::register_core(m);
  stoker::python::register_io(m);
  stoker::python::register_media(m);
  stoker::python::register_dataset(m);
  stoker::python::register_shards(m);
  stoker::python::register_sampling(m);
  stoker::python::register_transform(m);
  stoker::python::register_image(m);
  stoker::python::register_pipeline(m);
  stoker::python::register_etl(m);
}
