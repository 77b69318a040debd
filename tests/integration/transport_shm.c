/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_shm.c — integration tests of the shm data-plane transport (see transport_common.h
 * for what they show).
 */
#include <pthread.h>

#define TPT_KIND TP_SHM
#include "transport_common.h"
