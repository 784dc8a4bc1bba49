#ifndef IMGATEWAY_CZLIB_SHIM_H
#define IMGATEWAY_CZLIB_SHIM_H
#include <zlib.h>
#endif
