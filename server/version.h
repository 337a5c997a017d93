/*
 * server/version.h - the version flashd and flashctl report
 * (flashd --version, flashctl --version, /v1/version, /metrics).
 */
#ifndef FLASHD_VERSION_H
#define FLASHD_VERSION_H

#define FLASHD_VERSION "0.1"

#endif
