import os

from prefpipe.common.config import check_config_files

# Before Snakemake reads config/config.yaml (configfile: below) and before any value is used: every config file
# read strictly, so malformed YAML names its file and line and a key written twice is an error naming the key
# and the file (Snakemake's loader names neither and keeps the last copy of a duplicate key silently).
# config/ is the working directory's (a deployed workflow's own config); prefpipe is the installed package.
check_config_files(
    [
        path
        for path in ("config/config.yaml", *workflow.overwrite_configfiles)
        if os.path.isfile(path)
    ]
)
