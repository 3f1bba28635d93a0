/* How each of qconform's C extensions exposes the digest of its sources (docs/architecture.md, "Native
 * extensions"). The build (qconform/native_build.py) defines QCONFORM_SOURCE_DIGEST and
 * QCONFORM_SOURCE_FILES for each extension; the loader (qconform/native_sources.py) reads them back as
 * the module's source_digest and source_files and never calls a module whose digest differs from its
 * sources'. Built by other means, the module has an empty digest, which the loader takes as stale. */
#ifndef QCONFORM_NATIVE_MODULE_H
#define QCONFORM_NATIVE_MODULE_H

#include <Python.h>

#ifndef QCONFORM_SOURCE_DIGEST
#define QCONFORM_SOURCE_DIGEST ""
#define QCONFORM_SOURCE_FILES ""
#endif

/* The module ``def`` describes, with its source_digest and source_files constants; NULL (an exception
 * set) where it cannot be made. */
static PyObject *native_module_create(PyModuleDef *def) {
    PyObject *m = PyModule_Create(def);
    if (m != NULL && (PyModule_AddStringConstant(m, "source_digest", QCONFORM_SOURCE_DIGEST) < 0 ||
                      PyModule_AddStringConstant(m, "source_files", QCONFORM_SOURCE_FILES) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

#endif
