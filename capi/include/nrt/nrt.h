/* Forwarding header: libnrt include path "nrt/nrt.h". */
#pragma once
#include "../nrt.h"
