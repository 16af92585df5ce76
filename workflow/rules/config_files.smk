import os
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "src"))

from prefpipe.common.config import check_config_files

# Before Snakemake reads config/config.yaml (configfile: below) and before any value is used: every config file
# read strictly, so malformed YAML names its file and line and a key written twice is an error naming the key
# and the file (Snakemake's loader names neither and keeps the last copy of a duplicate key silently).
check_config_files(
    [
        path
        for path in ("config/config.yaml", *workflow.overwrite_configfiles)
        if os.path.isfile(path)
    ]
)
