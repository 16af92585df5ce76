import os

from prefpipe.common.config import check_config_files, read_config_file
from prefpipe.settings.merge import check_overlay

# Before Snakemake reads config/config.yaml (configfile: below) and before any value is used: every config file
# read strictly, so malformed YAML names its file and line, a key written twice is an error naming the key and
# the file (Snakemake's loader names neither and keeps the last copy of a duplicate key silently), a YAML alias
# is refused before anything walks the config, and a --configfile that writes `reward.variants: {}` (which
# merges to nothing) is refused naming the file.
# config/ is the working directory's (a deployed workflow's own config); prefpipe is the installed package.
check_config_files(
    [
        path
        for path in ("config/config.yaml", *workflow.overwrite_configfiles)
        if os.path.isfile(path)
    ]
)
for overlay_file in workflow.overwrite_configfiles:
    if os.path.isfile(overlay_file):
        check_overlay(read_config_file(overlay_file), str(overlay_file))
